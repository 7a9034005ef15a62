// Wafer-map defect classification: a small CNN labels the 26x26 die maps of a
// wafer probe test (no die / pass / fail, one-hot) with the nine WM-811K
// patterns (center, donut, edge-loc, edge-ring, loc, near-full, random,
// scratch, none). main owns a Trainer through a unique_ptr and drives it by
// named stages: fit epochs with a validation every few epochs, a calibration
// of the "none" rejection threshold, a CSV export for the fab dashboard, and a
// short adaptation to the lot of a new probe card.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace wafer {

constexpr int64_t kMap = 26;
constexpr int64_t kClasses = 9;
constexpr int64_t kNone = 8;
constexpr int64_t kAdaptBatches = 6;
constexpr int kValidateEvery = 4;

enum class Stage { Fit, Adapt, Validate, Calibrate, Export };

const char *stage_name(Stage s) {
  switch (s) {
    case Stage::Fit: return "fit";
    case Stage::Adapt: return "adapt";
    case Stage::Validate: return "validate";
    case Stage::Calibrate: return "calibrate";
    case Stage::Export: return "export";
  }
  return "?";
}

torch::Device pick_device() {
  // OK(torch-cuda-unguarded): CUDA only when the runtime reports it, else the CPU.
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

struct WaferNetImpl : nn::Module {
  WaferNetImpl()
      : features(register_module(
            "features",
            nn::Sequential(nn::Conv2d(nn::Conv2dOptions(3, 32, 3).padding(1)), nn::BatchNorm2d(32), nn::ReLU(),
                           nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::BatchNorm2d(64),
                           nn::ReLU(), nn::AdaptiveAvgPool2d(1)))),
        drop(register_module("drop", nn::Dropout(0.3))),
        head(register_module("head", nn::Linear(64, kClasses))) {}
  torch::Tensor forward(const torch::Tensor &x) { return head->forward(drop->forward(features->forward(x).flatten(1))); }
  nn::Sequential features;
  nn::Dropout drop;
  nn::Linear head;
};
TORCH_MODULE(WaferNet);

struct Lot {
  torch::Tensor maps;    // N x 3 x 26 x 26
  torch::Tensor labels;  // N
  int64_t size() const { return maps.size(0); }
  Lot slice(int64_t begin, int64_t len) const { return {maps.narrow(0, begin, len), labels.narrow(0, begin, len)}; }
};

Lot synth_lot(int64_t n) {
  auto codes = torch::randint(0, 3, {n, kMap, kMap}, torch::kLong);
  auto maps = torch::one_hot(codes, 3).permute({0, 3, 1, 2}).to(torch::kFloat);
  return {maps, torch::randint(0, kClasses, {n}, torch::kLong)};
}

torch::Tensor inverse_frequency(const torch::Tensor &labels) {
  auto counts = torch::bincount(labels, {}, kClasses).to(torch::kFloat);
  return counts.sum() / (counts + 1.0) / static_cast<double>(kClasses);
}

struct EpochStats {
  torch::Tensor loss_sum;
  int64_t steps = 0;
};

class Trainer {
 public:
  Trainer(torch::Device device, int64_t batch, torch::Tensor class_weights)
      : device_(device), batch_(batch), class_w_(std::move(class_weights)),
        opt_(net_->parameters(), torch::optim::AdamWOptions(2e-3).weight_decay(1e-4)) {
    net_->to(device_);
    stats_.loss_sum = torch::zeros({}, device_);
  }

  double run_stage(Stage stage, const Lot &lot) {
    switch (stage) {
      case Stage::Fit:
        net_->train();
        stats_.loss_sum = torch::zeros({}, device_);
        stats_.steps = 0;
        return fit_pass(lot, -1);
      case Stage::Adapt:
        return fit_pass(lot, kAdaptBatches);
      case Stage::Validate:
        net_->eval();
        return accuracy_pass(lot);
      case Stage::Calibrate:
        none_threshold_ = calibrate(lot);
        return none_threshold_;
      case Stage::Export:
        export_csv(lot, std::cout);
        return static_cast<double>(lot.size());
    }
    return 0.0;
  }

  double mean_loss() const { return stats_.steps ? stats_.loss_sum.item<double>() / stats_.steps : 0.0; }

 private:
  double fit_pass(const Lot &lot, int64_t max_batches) {
    int64_t correct = 0, seen = 0, step = 0;
    for (int64_t b = 0; b + batch_ <= lot.size(); b += batch_) {
      if (max_batches >= 0 && step >= max_batches) break;
      Lot mb = lot.slice(b, batch_);
      // BUG(torch-non-blocking-pageable): the lot's maps come from synth_lot() in pageable host memory.
      auto x = mb.maps.to(device_, /*non_blocking=*/true);
      auto y = mb.labels.to(device_);
      opt_.zero_grad();
      // BUG(torch-eval-mode-missing): Stage::Adapt runs right after Stage::Export left the net in eval mode; nothing calls train().
      auto logits = net_->forward(x);
      // BUG(torch-device-mismatch): class_w_ is the inverse frequency main computed on the host.
      auto loss = F::cross_entropy(logits, y, F::CrossEntropyFuncOptions().weight(class_w_));
      loss.backward();
      // OK(torch-missing-zero-grad): zero_grad() opens every step.
      opt_.step();
      // BUG(torch-loss-accumulation-graph): the member's running sum keeps every step's graph.
      stats_.loss_sum += loss;
      stats_.steps += 1;
      // BUG(torch-host-sync-in-loop): the accuracy count is read back on every step.
      correct += logits.argmax(1).eq(y).sum().item<int64_t>();
      seen += batch_;
      // OK(torch-host-sync-in-loop): logged every 50 steps only.
      if (++step % 50 == 0) std::cout << "  step " << step << " loss " << loss.item<double>() << '\n';
    }
    return seen ? static_cast<double>(correct) / seen : 0.0;
  }

  double accuracy_pass(const Lot &lot) {
    torch::NoGradGuard no_grad;
    int64_t correct = 0;
    for (int64_t b = 0; b < lot.size(); b += batch_) {
      Lot mb = lot.slice(b, std::min(batch_, lot.size() - b));
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): Stage::Validate called eval(); the guard is above.
      auto logits = net_->forward(mb.maps.to(device_));
      correct += logits.argmax(1).eq(mb.labels.to(device_)).sum().item<int64_t>();
    }
    return static_cast<double>(correct) / static_cast<double>(lot.size());
  }

  double calibrate(const Lot &lot) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> none_prob;
    for (int64_t b = 0; b < lot.size(); b += batch_) {
      Lot mb = lot.slice(b, std::min(batch_, lot.size() - b));
      // BUG(torch-eval-mode-missing): after the epoch loop the last stage may be Fit, so BatchNorm and dropout still train.
      auto probs = torch::softmax(net_->forward(mb.maps.to(device_)), 1);
      none_prob.push_back(probs.select(1, kNone).cpu());
    }
    return torch::quantile(torch::cat(none_prob), 0.05).item<double>();
  }

  void export_csv(const Lot &lot, std::ostream &out) {
    net_->eval();
    out << "wafer,pattern,confidence,accept\n";
    for (int64_t b = 0; b < lot.size(); b += batch_) {
      Lot mb = lot.slice(b, std::min(batch_, lot.size() - b));
      // BUG(torch-inference-without-no-grad): eval() alone; autograd records every export batch.
      auto probs = torch::softmax(net_->forward(mb.maps.to(device_)), 1).cpu();
      auto best = probs.max(1);
      for (int64_t j = 0; j < probs.size(0); ++j) {
        const auto cls = std::get<1>(best)[j].item<int64_t>();
        const bool accept = cls != kNone || probs[j][kNone].item<double>() >= none_threshold_;
        out << b + j << ',' << cls << ',' << std::get<0>(best)[j].item<double>() << ',' << accept << '\n';
      }
    }
  }

  torch::Device device_;
  int64_t batch_;
  torch::Tensor class_w_;
  WaferNet net_;
  torch::optim::AdamW opt_;
  EpochStats stats_;
  double none_threshold_ = 0.0;
};

}  // namespace wafer

int main(int argc, char **argv) {
  using namespace wafer;
  torch::manual_seed(380);
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 10;
  const torch::Device device = pick_device();

  Lot train_lot = synth_lot(2048), val_lot = synth_lot(512), field_lot = synth_lot(300), new_card = synth_lot(256);
  auto trainer = std::make_unique<Trainer>(device, 64, inverse_frequency(train_lot.labels));

  for (int epoch = 0; epoch < epochs; ++epoch) {
    const double train_acc = trainer->run_stage(Stage::Fit, train_lot);
    if ((epoch + 1) % kValidateEvery == 0) {
      const double val_acc = trainer->run_stage(Stage::Validate, val_lot);
      std::cout << "epoch " << epoch << " loss " << trainer->mean_loss() << " train " << train_acc << " val " << val_acc
                << '\n';
    }
  }
  std::cout << stage_name(Stage::Calibrate) << " -> " << trainer->run_stage(Stage::Calibrate, val_lot) << '\n';
  std::cout << stage_name(Stage::Export) << " -> " << trainer->run_stage(Stage::Export, field_lot) << " wafers\n";
  std::cout << stage_name(Stage::Adapt) << " -> " << trainer->run_stage(Stage::Adapt, new_card) << '\n';
  std::cout << stage_name(Stage::Validate) << " -> " << trainer->run_stage(Stage::Validate, new_card) << '\n';
  return 0;
}
