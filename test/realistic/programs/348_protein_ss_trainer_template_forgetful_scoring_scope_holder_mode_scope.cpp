// Protein secondary structure (Q3: helix / strand / coil) per residue, from
// one-hot sequence plus PSSM profile windows. A class template Trainer<Model>
// owns the network and its optimizer; a free fit() runs a sanity validation,
// then epochs of train_epoch() / validate(). Validation puts the network in
// scoring mode through a small RAII object; the fine-tuning on membrane
// proteins uses a holder-based ModeScope<Holder> that restores the mode it
// found. Predictions for the CASP targets are exported at the end.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kFeatures = 40;  // 20 one-hot + 20 PSSM columns
constexpr int64_t kWindow = 128, kClasses = 3;

struct SSNetImpl : nn::Module {
  explicit SSNetImpl(int64_t hidden)
      : conv1(register_module("conv1", nn::Conv1d(nn::Conv1dOptions(kFeatures, hidden, 7).padding(3)))),
        bn1(register_module("bn1", nn::BatchNorm1d(hidden))),
        conv2(register_module("conv2", nn::Conv1d(nn::Conv1dOptions(hidden, hidden, 5).padding(4).dilation(2)))),
        drop(register_module("drop", nn::Dropout(0.3))),
        out(register_module("out", nn::Conv1d(nn::Conv1dOptions(hidden, kClasses, 1)))) {}
  // x: [B, kFeatures, L] -> logits [B, kClasses, L]
  torch::Tensor forward(const torch::Tensor &x) {
    auto h = torch::relu(bn1->forward(conv1->forward(x)));
    h = drop->forward(torch::relu(conv2->forward(h)) + h);
    return out->forward(h);
  }
  nn::Conv1d conv1;
  nn::BatchNorm1d bn1;
  nn::Conv1d conv2;
  nn::Dropout drop;
  nn::Conv1d out;
};
TORCH_MODULE(SSNet);

struct ChainBatch {
  torch::Tensor features;  // [B, kFeatures, L]
  torch::Tensor labels;    // [B, L], -100 on padding
};

ChainBatch synth_batch(int64_t n, torch::Device device) {
  auto labels = torch::randint(kClasses, {n, kWindow}, torch::kLong);
  auto profile = torch::randn({n, kFeatures, kWindow}) * 0.5;
  profile.narrow(1, 0, kClasses) += torch::one_hot(labels, kClasses).permute({0, 2, 1}).to(torch::kFloat);
  labels.narrow(1, kWindow - 16, 16).fill_(-100);
  return {profile.to(device), labels.to(device)};
}

// Scoring context: no autograd and frozen dropout / batch statistics while
// the object lives.
class ScoringScope {
 public:
  explicit ScoringScope(nn::Module &module) : module_(module) { module_.eval(); }

 private:
  nn::Module &module_;
  torch::NoGradGuard no_grad_;
};

// Switches the holder's module to eval() and gives back the mode it found.
template <typename Holder>
class ModeScope {
 public:
  explicit ModeScope(Holder holder) : holder_(std::move(holder)), was_training_(holder_->is_training()) {
    holder_->eval();
  }
  ~ModeScope() { holder_->train(was_training_); }
  ModeScope(const ModeScope &) = delete;
  ModeScope &operator=(const ModeScope &) = delete;

 private:
  Holder holder_;
  bool was_training_;
};

struct EpochStats {
  torch::Tensor loss_sum;
  int64_t batches = 0;
};

template <typename Model>
class Trainer {
 public:
  Trainer(Model model, double lr) : model_(std::move(model)), opt_(model_->parameters(), torch::optim::AdamOptions(lr)) {}

  EpochStats train_epoch(const std::vector<ChainBatch> &batches) {
    EpochStats stats;
    stats.loss_sum = torch::zeros({}, batches.front().features.options());
    for (const auto &b : batches) {
      opt_.zero_grad();
      // BUG(torch-eval-mode-missing): validate()'s ScoringScope switched the
      // network to eval() and never switched it back; fit() validates before
      // the first epoch, so every epoch trains with dropout and batch
      // statistics frozen.
      auto logits = model_->forward(b.features);
      auto loss = F::cross_entropy(logits, b.labels, F::CrossEntropyFuncOptions().ignore_index(-100));
      loss.backward();
      opt_.step();
      // BUG(torch-loss-accumulation-graph): the struct field outlives the
      // step and keeps every step's graph.
      stats.loss_sum += loss;
      ++stats.batches;
    }
    return stats;
  }

  double validate(const std::vector<ChainBatch> &batches) {
    ScoringScope scoring(*model_);
    int64_t correct = 0, total = 0;
    for (const auto &b : batches) {
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): the
      // scope object switched to eval() and holds a NoGradGuard member.
      auto pred = model_->forward(b.features).argmax(1);
      auto mask = b.labels.ne(-100);
      correct += pred.eq(b.labels).logical_and(mask).sum().template item<int64_t>();
      total += mask.sum().template item<int64_t>();
    }
    return static_cast<double>(correct) / static_cast<double>(total);
  }

  Model &model() { return model_; }

 private:
  Model model_;
  torch::optim::Adam opt_;
};

template <typename Model>
void fit(Trainer<Model> &trainer, const std::vector<ChainBatch> &train, const std::vector<ChainBatch> &val,
         int epochs) {
  std::cout << "sanity Q3 " << trainer.validate(val) << '\n';
  for (int epoch = 0; epoch < epochs; ++epoch) {
    auto stats = trainer.train_epoch(train);
    // OK(torch-host-sync-in-loop): once per epoch, outside the step loop.
    std::cout << "epoch " << epoch << " loss " << stats.loss_sum.template item<double>() / stats.batches << " Q3 "
              << trainer.validate(val) << '\n';
  }
}

void attach_mask(ChainBatch &b, torch::Device device) {
  // BUG(torch-tensor-to-discarded): the label tensor is not moved in place.
  b.labels.to(device);
}

void fine_tune(SSNet &net, const std::vector<ChainBatch> &membrane, const std::vector<ChainBatch> &val) {
  net->train();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  double meter = 0.0;
  auto log_step = [&meter](const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): called on every fine-tuning step; item()
    // waits for the device each time.
    meter = 0.9 * meter + 0.1 * loss.item<double>();
  };
  for (int epoch = 0; epoch < 2; ++epoch) {
    opt.zero_grad();
    for (const auto &b : membrane) {
      // OK(torch-eval-mode-missing): train() above, and ModeScope restores it.
      auto loss = F::cross_entropy(net->forward(b.features), b.labels, F::CrossEntropyFuncOptions().ignore_index(-100));
      loss.backward();
      // BUG(torch-missing-zero-grad): gradients are reset once per epoch, so
      // every step applies the sum of the epoch's earlier gradients.
      opt.step();
      log_step(loss);
    }
    {
      ModeScope<SSNet> scope(net);
      torch::NoGradGuard no_grad;
      double acc = 0.0;
      for (const auto &b : val)
        // OK(torch-eval-mode-missing): ModeScope switched the holder to eval().
        acc += net->forward(b.features).argmax(1).eq(b.labels).to(torch::kFloat).mean().item<double>();
      std::cout << "membrane epoch " << epoch << " acc " << acc / static_cast<double>(val.size()) << " ema loss "
                << meter << '\n';
    }
  }
}

std::vector<torch::Tensor> export_predictions(SSNet &net, const std::vector<ChainBatch> &targets) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> out;
  for (const auto &t : targets)
    // BUG(torch-eval-mode-missing): fine_tune()'s ModeScope restored the
    // training mode it found; the CASP targets are predicted with dropout on.
    out.push_back(torch::softmax(net->forward(t.features), 1).cpu());
  return out;
}

int main() {
  torch::manual_seed(348);
  // OK(torch-cuda-unguarded): is_available() decides.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  std::vector<ChainBatch> train, val, membrane, casp;
  for (int i = 0; i < 12; ++i) train.push_back(synth_batch(16, device));
  for (int i = 0; i < 3; ++i) val.push_back(synth_batch(16, device));
  for (int i = 0; i < 4; ++i) membrane.push_back(synth_batch(8, device));
  for (int i = 0; i < 2; ++i) {
    ChainBatch b = synth_batch(4, torch::kCPU);
    b.features = b.features.to(device);
    attach_mask(b, device);
    casp.push_back(b);
  }

  SSNet net(64);
  net->to(device);
  Trainer<SSNet> trainer(net, 1e-3);
  fit(trainer, train, val, 3);

  SSNet &tuned = trainer.model();
  fine_tune(tuned, membrane, val);
  auto probs = export_predictions(tuned, casp);
  std::cout << "exported " << probs.size() << " targets\n";
}
