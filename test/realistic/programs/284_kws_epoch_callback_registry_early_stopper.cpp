// Keyword spotting (12 command words) on 40-band log-mel clips of one second.
// A dilated conv net with batch norm and dropout is trained by a Trainer that
// fires the epoch-end callbacks main() registers (a per-word recall report and
// a calibration probe) and then asks an early-stopping monitor whether the
// validation loss has stopped improving.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace kws {

constexpr int64_t kMels = 40, kFrames = 101, kWords = 12;

struct ClipBatch {
  torch::Tensor feats;  // [B, 40, 101]
  torch::Tensor label;  // [B]
};

std::vector<ClipBatch> synth_split(int64_t batches, int64_t batch_size, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<ClipBatch> out;
  for (int64_t i = 0; i < batches; ++i) {
    auto label = torch::randint(kWords, {batch_size}, gen, torch::TensorOptions().dtype(torch::kLong));
    auto feats = torch::randn({batch_size, kMels, kFrames}, gen) +
                 0.1 * label.to(torch::kFloat).view({batch_size, 1, 1});
    out.push_back({feats, label});
  }
  return out;
}

struct KwsNetImpl : nn::Module {
  KwsNetImpl()
      : conv1(register_module("conv1", nn::Conv1d(nn::Conv1dOptions(kMels, 64, 5).padding(2)))),
        bn1(register_module("bn1", nn::BatchNorm1d(64))),
        conv2(register_module("conv2", nn::Conv1d(nn::Conv1dOptions(64, 64, 5).padding(4).dilation(2)))),
        bn2(register_module("bn2", nn::BatchNorm1d(64))),
        drop(register_module("drop", nn::Dropout(0.2))),
        out(register_module("out", nn::Linear(64, kWords))) {}

  torch::Tensor forward(const torch::Tensor &x) {
    auto h = torch::relu(bn1->forward(conv1->forward(x)));
    h = torch::relu(bn2->forward(conv2->forward(h)));
    return out->forward(drop->forward(std::get<0>(h.max(2))));
  }

  nn::Conv1d conv1;
  nn::BatchNorm1d bn1;
  nn::Conv1d conv2;
  nn::BatchNorm1d bn2;
  nn::Dropout drop;
  nn::Linear out;
};
TORCH_MODULE(KwsNet);

class EarlyStopping {
 public:
  EarlyStopping(int patience, torch::Device device) : patience_(patience), device_(device) {}

  // True once the validation loss has not improved for `patience_` epochs.
  bool should_stop(KwsNet &net, const std::vector<ClipBatch> &val) {
    torch::NoGradGuard no_grad;
    auto total = torch::zeros({}, torch::TensorOptions().device(device_));
    int64_t n = 0;
    for (const auto &b : val) {
      // BUG(torch-eval-mode-missing): fit() hands the model over straight from
      // its training epoch; dropout and batch statistics are live here.
      auto logits = net->forward(b.feats.to(device_));
      // OK(torch-loss-accumulation-graph): under the no-grad guard, no graph.
      total += F::cross_entropy(logits, b.label.to(device_), F::CrossEntropyFuncOptions().reduction(torch::kSum));
      n += b.label.size(0);
    }
    // OK(torch-host-sync-in-loop): one read per epoch, after the validation loop.
    const double loss = total.item<double>() / std::max<int64_t>(n, 1);
    if (loss < best_ - 1e-4) {
      best_ = loss;
      bad_epochs_ = 0;
    } else {
      ++bad_epochs_;
    }
    return bad_epochs_ >= patience_;
  }

  double best() const { return best_; }

 private:
  int patience_;
  torch::Device device_;
  double best_ = std::numeric_limits<double>::infinity();
  int bad_epochs_ = 0;
};

struct EpochStats {
  torch::Tensor loss_sum;
  int64_t steps = 0;
};

class Trainer {
 public:
  using EpochCallback = std::function<void(KwsNet &, int)>;

  Trainer(KwsNet net, torch::Device device, double lr)
      : net_(std::move(net)), device_(device),
        opt_(net_->parameters(), torch::optim::AdamWOptions(lr).weight_decay(1e-2)), stopper_(3, device) {}

  void on_epoch_end(EpochCallback cb) { callbacks_.push_back(std::move(cb)); }

  // Returns the number of epochs run.
  int fit(const std::vector<ClipBatch> &train, const std::vector<ClipBatch> &val, int max_epochs) {
    for (int epoch = 0; epoch < max_epochs; ++epoch) {
      net_->train();
      EpochStats stats{torch::zeros({}, torch::TensorOptions().device(device_)), 0};
      int64_t correct = 0, seen = 0;
      for (const auto &b : train) {
        auto x = b.feats.to(device_);
        auto y = b.label.to(device_);
        opt_.zero_grad();
        // OK(torch-eval-mode-missing): train() at the top of every epoch undoes the callbacks.
        auto logits = net_->forward(x);
        auto loss = F::cross_entropy(logits, y, F::CrossEntropyFuncOptions().label_smoothing(0.1));
        loss.backward();
        opt_.step();
        // BUG(torch-loss-accumulation-graph): the epoch's sum keeps every
        // step's autograd graph alive until the epoch ends.
        stats.loss_sum += loss;
        ++stats.steps;
        // BUG(torch-host-sync-in-loop): the running accuracy reads a count
        // back from the device on every step.
        correct += logits.argmax(1).eq(y).sum().item<int64_t>();
        seen += y.size(0);
      }
      // OK(torch-host-sync-in-loop): once per epoch, after the step loop.
      std::cout << "epoch " << epoch << " loss " << stats.loss_sum.item<double>() / std::max<int64_t>(stats.steps, 1)
                << " train acc " << static_cast<double>(correct) / std::max<int64_t>(seen, 1) << '\n';
      for (auto &cb : callbacks_)
        cb(net_, epoch);
      if (stopper_.should_stop(net_, val))
        return epoch + 1;
    }
    return max_epochs;
  }

  double best_val_loss() const { return stopper_.best(); }

 private:
  KwsNet net_;
  torch::Device device_;
  torch::optim::AdamW opt_;
  EarlyStopping stopper_;
  std::vector<EpochCallback> callbacks_;
};

}  // namespace kws

using namespace kws;

int main() {
  torch::manual_seed(284);
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  auto train = synth_split(120, 64, 1), val = synth_split(16, 64, 2), test = synth_split(16, 64, 3);

  KwsNet net;
  net->to(device);
  Trainer trainer(net, device, 2e-3);

  // Per-word recall: the worst word is what the product team watches.
  trainer.on_epoch_end([&val, device](KwsNet &model, int epoch) {
    torch::NoGradGuard no_grad;
    auto hits = torch::zeros({kWords}, torch::kLong), totals = torch::zeros({kWords}, torch::kLong);
    for (const auto &b : val) {
      // BUG(torch-eval-mode-missing): the callback runs right after the
      // epoch's steps and never calls eval().
      // OK(torch-host-sync-in-loop): validation batches, once per epoch.
      auto pred = model->forward(b.feats.to(device)).argmax(1).cpu();
      hits.index_add_(0, b.label, pred.eq(b.label).to(torch::kLong));
      totals.index_add_(0, b.label, torch::ones_like(b.label));
    }
    auto recall = hits.to(torch::kDouble) / totals.clamp_min(1).to(torch::kDouble);
    std::cout << "epoch " << epoch << " worst-word recall " << recall.min().item<double>() << '\n';
  });

  // Calibration probe every other epoch: the gap between mean confidence and accuracy.
  trainer.on_epoch_end([&val, device](KwsNet &model, int epoch) {
    if (epoch % 2 != 0)
      return;
    const bool was_training = model->is_training();
    model->eval();
    std::vector<torch::Tensor> confidence, right;
    for (const auto &b : val) {
      // BUG(torch-inference-without-no-grad): eval() is set but no guard is
      // held: autograd records every validation batch.
      // OK(torch-eval-mode-missing): eval() above.
      auto prob = torch::softmax(model->forward(b.feats.to(device)), 1);
      auto top = prob.max(1);
      // OK(torch-loss-accumulation-graph): detached before it is kept.
      confidence.push_back(std::get<0>(top).detach());
      right.push_back(std::get<1>(top).eq(b.label.to(device)).to(torch::kFloat));
    }
    const auto gap = (torch::cat(confidence).mean() - torch::cat(right).mean()).abs();
    std::cout << "epoch " << epoch << " calibration gap " << gap.item<double>() << '\n';
    model->train(was_training);
  });

  const int epochs = trainer.fit(train, val, 30);
  std::cout << "stopped after " << epochs << " epochs, best val loss " << trainer.best_val_loss() << '\n';

  net->eval();
  torch::NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (const auto &b : test) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() and the guard above.
    auto pred = net->forward(b.feats.to(device)).argmax(1);
    correct += pred.eq(b.label.to(device)).sum().item<int64_t>();
    total += b.label.size(0);
  }
  std::cout << "test accuracy " << static_cast<double>(correct) / std::max<int64_t>(total, 1) << '\n';
  return 0;
}
