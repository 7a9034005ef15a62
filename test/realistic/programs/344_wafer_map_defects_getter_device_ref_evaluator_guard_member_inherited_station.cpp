// Wafer-map defect inspection: 52x52 die maps (no die / pass / fail, one-hot,
// NHWC from the tester) are classified into the nine WM-811K patterns by a conv
// net trained with logit adjustment, validated through an evaluator object that
// holds its own no-grad guard; a reject threshold is calibrated on a hold-out
// lot and an inherited-constructor station inspects lots. LibTorch 1.13/2.x.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace fab {

constexpr int64_t kMap = 52, kStates = 3, kClasses = 9;
const std::vector<std::string> kPatterns{"Center", "Donut", "Edge-Loc", "Edge-Ring", "Loc", "Near-full", "Random", "Scratch", "None"};

class RuntimeContext {
 public:
  // OK(torch-cuda-unguarded): the ternary falls back to the CPU.
  RuntimeContext() : device_(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU) {}
  const torch::Device &device() const { return device_; }
  bool on_gpu() const { return device_.is_cuda(); }

 private:
  torch::Device device_;
};

struct WaferBatch {
  torch::Tensor maps;    // [B, 52, 52, 3] as the tester writes them, later NCHW
  torch::Tensor labels;  // [B]
};

std::vector<WaferBatch> synth_lot(int64_t batches, int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<WaferBatch> out;
  for (int64_t b = 0; b < batches; ++b) {
    auto state = torch::randint(kStates, {n, kMap, kMap}, torch::kLong);
    out.push_back({F::one_hot(state, kStates).to(torch::kFloat), torch::randint(kClasses, {n}, torch::kLong)});
  }
  return out;
}

// The tester writes NHWC; the net wants NCHW.
template <typename Batch>
void to_channels_first(std::vector<Batch> &lot) {
  for (auto &b : lot) {
    b.maps = b.maps.permute({0, 3, 1, 2});
    // BUG(torch-tensor-to-discarded): contiguous() returns a new tensor; the
    // permuted view stays strided for every convolution.
    b.maps.contiguous();
  }
}

struct WaferNetImpl : nn::Module {
  WaferNetImpl()
      : features(register_module(
            "features", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(kStates, 32, 3).padding(1)), nn::BatchNorm2d(32),
                                       nn::ReLU(), nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)),
                                       nn::BatchNorm2d(64), nn::ReLU(), nn::AdaptiveAvgPool2d(4)))),
        drop(register_module("drop", nn::Dropout(0.3))),
        head(register_module("head", nn::Linear(64 * 16, kClasses))) {}
  torch::Tensor forward(const torch::Tensor &maps) {
    return head->forward(drop->forward(features->forward(maps).flatten(1)));
  }
  nn::Sequential features;
  nn::Dropout drop;
  nn::Linear head;
};
TORCH_MODULE(WaferNet);

// Validation object: no autograd and eval mode for as long as it lives.
class Evaluator {
 public:
  explicit Evaluator(WaferNet net) : net_(std::move(net)) { net_->eval(); }
  ~Evaluator() { net_->train(); }
  double accuracy(const std::vector<WaferBatch> &lot, const torch::Device &device) {
    torch::Tensor correct = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(device));
    int64_t seen = 0;
    for (const auto &b : lot) {
      // OK(torch-inference-without-no-grad, torch-eval-mode-missing): guard_ is
      // held for the evaluator's lifetime and the constructor called eval().
      auto pred = net_->forward(b.maps.to(device)).argmax(1);
      // OK(torch-loss-accumulation-graph): a count of a no-grad argmax.
      correct += (pred == b.labels.to(device)).sum();
      seen += b.labels.size(0);
    }
    return static_cast<double>(correct.item<int64_t>()) / static_cast<double>(seen);
  }

 private:
  torch::NoGradGuard guard_;
  WaferNet net_;
};

// Reports the mean training loss of each epoch.
class LossMeter {
 public:
  void record(const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): called once per step; item() waits for
    // the step's kernels on the GPU.
    sum_ += loss.item<double>();
    ++count_;
  }
  double mean_and_reset() {
    const double m = count_ ? sum_ / static_cast<double>(count_) : 0.0;
    sum_ = 0.0, count_ = 0;
    return m;
  }

 private:
  double sum_ = 0.0;
  int64_t count_ = 0;
};

class DefectTrainer {
 public:
  DefectTrainer(WaferNet net, torch::Device device, const std::vector<double> &class_freq)
      : net_(std::move(net)), device_(device),
        log_prior_(torch::log(torch::tensor(class_freq)).to(torch::kFloat).view({1, kClasses})),
        opt_(net_->parameters(), torch::optim::AdamOptions(1e-3).weight_decay(1e-4)) {}

  void fit(const std::vector<WaferBatch> &train, const std::vector<WaferBatch> &val, int epochs) {
    for (int epoch = 0; epoch < epochs; ++epoch) {
      int64_t step = 0;
      for (const auto &b : train) {
        auto maps = b.maps.to(device_);
        auto labels = b.labels.to(device_);
        // OK(torch-missing-zero-grad): reset before every backward.
        opt_.zero_grad();
        // OK(torch-eval-mode-missing): the previous epoch's Evaluator put the
        // net back in training mode when it was destroyed.
        auto logits = net_->forward(maps);
        // BUG(torch-device-mismatch): log_prior_ was built on the host in the
        // constructor; logits are on `device_`.
        auto loss = F::cross_entropy(logits + log_prior_, labels);
        loss.backward();
        opt_.step();
        meter_.record(loss);
        // OK(torch-host-sync-in-loop): logged every 50 steps only.
        if (++step % 50 == 0)
          std::cout << "  step " << step << " loss " << loss.item<float>() << '\n';
      }
      Evaluator ev(net_);
      std::cout << "epoch " << epoch << " train " << meter_.mean_and_reset() << " val acc "
                << ev.accuracy(val, device_) << '\n';
    }
  }

 private:
  WaferNet net_;
  torch::Device device_;
  torch::Tensor log_prior_;
  torch::optim::Adam opt_;
  LossMeter meter_;
};

// Lowest max-probability among correctly classified hold-out maps: below it, a
// wafer goes to a human reviewer.
double calibrate_reject_threshold(WaferNet &net, const std::vector<WaferBatch> &holdout, const torch::Device &device) {
  torch::NoGradGuard no_grad;
  double threshold = 1.0;
  for (const auto &b : holdout) {
    // BUG(torch-eval-mode-missing): fit() ends with the Evaluator restoring
    // training mode; dropout and batch statistics skew the confidences.
    auto probs = torch::softmax(net->forward(b.maps.to(device)), 1);
    auto [conf, pred] = probs.max(1);
    auto ok = pred == b.labels.to(device);
    if (ok.any().item<bool>())
      threshold = std::min(threshold, conf.masked_select(ok).min().item<double>());
  }
  return threshold;
}

// Holds a deployed net, on its device and in eval mode.
class InspectionStation {
 public:
  InspectionStation(WaferNet net, torch::Device device) : net_(std::move(net)), device_(device) {
    // OK(torch-tensor-to-discarded): Module::to moves the parameters in place.
    net_->to(device_);
    net_->eval();
  }

 protected:
  WaferNet net_;
  torch::Device device_;
};

class LotInspector : public InspectionStation {
 public:
  using InspectionStation::InspectionStation;

  std::vector<std::string> classify(const torch::Tensor &maps, double threshold, bool pinned_host) {
    torch::NoGradGuard no_grad;
    torch::Tensor x;
    if (pinned_host && device_.is_cuda()) {
      auto staged = maps.pin_memory();
      // OK(torch-non-blocking-pageable): the source is the pinned staging copy.
      x = staged.to(device_, /*non_blocking=*/true);
    } else {
      x = maps.to(device_);
    }
    // OK(torch-eval-mode-missing, torch-device-mismatch): the inherited
    // constructor moved the net to device_ and called eval().
    auto probs = torch::softmax(net_->forward(x), 1);
    auto host = probs.to(torch::kCPU, /*non_blocking=*/true);
    if (device_.is_cuda())
      torch::cuda::synchronize();
    // OK(torch-non-blocking-d2h-race): synchronised above whenever the copy
    // was asynchronous.
    auto acc = host.accessor<float, 2>();
    std::vector<std::string> verdicts;
    for (int64_t i = 0; i < acc.size(0); ++i) {
      int64_t best = 0;
      for (int64_t c = 1; c < kClasses; ++c) best = acc[i][c] > acc[i][best] ? c : best;
      verdicts.push_back(acc[i][best] < threshold ? "review" : kPatterns[static_cast<size_t>(best)]);
    }
    return verdicts;
  }
};

}  // namespace fab

int main() {
  fab::RuntimeContext ctx;
  const torch::Device &dev = ctx.device();

  auto train = fab::synth_lot(40, 64, 1), val = fab::synth_lot(8, 64, 2), holdout = fab::synth_lot(4, 64, 3);
  for (auto *lot : {&train, &val, &holdout}) fab::to_channels_first(*lot);

  fab::WaferNet net;
  net->to(dev);
  {
    // Smoke test of the deployment path before a long run.
    torch::NoGradGuard no_grad;
    net->eval();
    auto probe = val.front().maps.to(dev);
    // OK(torch-device-mismatch): the model and the probe were both moved with
    // the same reference to the context's device.
    std::cout << "probe logits " << net->forward(probe).sizes() << '\n';
    net->train();
  }

  const std::vector<double> freq{0.04, 0.01, 0.05, 0.09, 0.04, 0.01, 0.01, 0.01, 0.74};
  fab::DefectTrainer trainer(net, dev, freq);
  trainer.fit(train, val, 3);

  const double threshold = fab::calibrate_reject_threshold(net, holdout, dev);

  fab::LotInspector inspector(net, dev);
  auto incoming = fab::synth_lot(1, 16, 4);
  fab::to_channels_first(incoming);
  for (const auto &v : inspector.classify(incoming.front().maps, threshold, ctx.on_gpu())) std::cout << v << '\n';
}
