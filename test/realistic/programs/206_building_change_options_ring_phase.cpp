// Building-change detection on co-registered Sentinel-2 tile pairs (before
// and after a storm; 4 bands, 64x64 px). A Siamese encoder with shared
// weights embeds both dates and a 1x1 head turns |f_before - f_after| into a
// per-pixel change logit. Everything the trainer needs (device, the border
// weights that damp the cloud-prone tile edges, accumulation, a progress
// callback) arrives in one options struct; the trainer keeps the last eight
// losses in a ring for a smoothed curve, and two staging tiles for sweeping
// whole scenes.
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kBands = 4, kTile = 64, kBatch = 16;

struct SiameseChangeNetImpl : torch::nn::Module {
  SiameseChangeNetImpl()
      : encoder(register_module(
            "encoder", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(kBands, 32, 3).padding(1)),
                                             torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                                             torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 32, 3).padding(1)),
                                             torch::nn::BatchNorm2d(32), torch::nn::ReLU()))),
        head(register_module("head", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 1, 1)))) {}

  torch::Tensor forward(const torch::Tensor &before, const torch::Tensor &after) {
    return head->forward(torch::abs(encoder->forward(before) - encoder->forward(after)));
  }

  torch::nn::Sequential encoder;
  torch::nn::Conv2d head;
};
TORCH_MODULE(SiameseChangeNet);

struct TilePair {
  torch::Tensor before, after, change;  // [B, 4, H, W] x2, [B, 1, H, W]
};

// Synthetic pairs: a bright rectangle (a new roof) appears in the after tile.
TilePair synthetic_pairs(int64_t n) {
  auto before = torch::rand({n, kBands, kTile, kTile}) * 0.3;
  auto after = before + 0.02 * torch::randn({n, kBands, kTile, kTile});
  auto change = torch::zeros({n, 1, kTile, kTile});
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = (i * 7) % 40, c = (i * 13) % 40;
    after[i].narrow(1, r, 12).narrow(2, c, 16).add_(0.5);
    change[i].narrow(1, r, 12).narrow(2, c, 16).fill_(1.0);
  }
  return {before, after, change};
}

// Clear-sky mask from the blue band (1 = clear) and the cloudy fraction.
std::pair<torch::Tensor, double> clear_sky(const torch::Tensor &tile, double threshold) {
  auto clear = torch::ones({tile.size(0), 1, kTile, kTile});
  clear.masked_fill_(tile.narrow(1, 0, 1) > threshold, 0.0);
  return {clear, 1.0 - clear.mean().item<double>()};
}

SiameseChangeNet make_net(torch::Device device) {
  SiameseChangeNet net;
  net->to(device);
  return net;
}

struct ChangeOptions {
  torch::Device device = torch::kCPU;
  torch::Tensor border_weights;  // [1, 1, kTile, kTile]
  int64_t accum_steps = 4;
  double lr = 3e-4;
  std::function<void(int64_t, double)> on_progress;
};

enum class Phase { kTrain, kValidate };

using Metric = std::function<double(const torch::Tensor &, const torch::Tensor &)>;

class ChangeTrainer {
 public:
  explicit ChangeTrainer(const ChangeOptions &o)
      : device_(o.device),
        net_(make_net(o.device)),
        opt_(net_->parameters(), torch::optim::AdamOptions(o.lr)),
        border_weights_(o.border_weights.to(o.device)),
        accum_(o.accum_steps),
        on_progress_(o.on_progress) {
    for (auto &stage : staging_)
      stage = torch::empty({2, kBands, kTile, kTile}, torch::TensorOptions().pinned_memory(device_.is_cuda()));
    metrics_["iou"] = [](const torch::Tensor &prob, const torch::Tensor &truth) {
      auto p = prob > 0.5, t = truth > 0.5;
      return ((p & t).sum().item<double>() + 1.0) / ((p | t).sum().item<double>() + 1.0);
    };
    metrics_["recall"] = [](const torch::Tensor &prob, const torch::Tensor &truth) {
      auto t = truth > 0.5;
      return ((prob > 0.5) & t).sum().item<double>() / (t.sum().item<double>() + 1.0);
    };
  }

  double run_epoch(Phase phase, const std::vector<TilePair> &batches) {
    std::optional<torch::NoGradGuard> no_grad;
    switch (phase) {
      case Phase::kTrain:
        net_->train();
        break;
      case Phase::kValidate:
        net_->eval();
        no_grad.emplace();
        break;
    }
    std::map<std::string, double> sums;
    double masked_errors = 0.0;
    for (const auto &b : batches) {
      auto before = b.before.to(device_);
      auto after = b.after.to(device_);
      auto change = b.change.to(device_);
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): the
      // switch above put the net in the mode of the phase and the validation
      // branch holds a no-grad guard.
      auto logits = net_->forward(before, after);
      if (phase == Phase::kTrain) {
        auto per_pixel = F::binary_cross_entropy_with_logits(
            logits, change, F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone));
        // OK(torch-device-mismatch): the constructor moved the border weights
        // to the options' device.
        auto loss = (per_pixel * border_weights_).mean();
        // BUG(torch-grad-accumulation-unscaled): accum_ mean losses add up in
        // .grad() before each step, an accum_-times larger update.
        loss.backward();
        if (++micro_ % accum_ == 0) {
          opt_.step();
          opt_.zero_grad();
        }
        // OK(torch-loss-accumulation-graph): the ring keeps detached losses.
        recent_[slot_++ % recent_.size()] = loss.detach();
        best_smoothed_ = std::min(best_smoothed_, smoothed_loss());
        if (micro_ % 100 == 0 && on_progress_)
          on_progress_(micro_, best_smoothed_);
      } else {
        auto prob = torch::sigmoid(logits);
        for (const auto &[name, metric] : metrics_)
          // OK(torch-device-mismatch, torch-host-sync-in-loop): both arguments
          // are on device_; the metrics read back on validation batches only.
          sums[name] += metric(prob, change);
        auto wrong = ((logits > 0) != (change > 0.5)).to(torch::kFloat);
        auto clear = clear_sky(b.after, 0.9).first;
        // BUG(torch-device-mismatch): the clear-sky mask is computed from the
        // host copy of the after tile; `wrong` is on device_.
        masked_errors += (wrong * clear).sum().item<double>();
      }
    }
    if (phase == Phase::kValidate)
      for (const auto &[name, total] : sums)
        std::cout << "  val " << name << " " << total / static_cast<double>(batches.size()) << "\n";
    return phase == Phase::kTrain ? best_smoothed_ : masked_errors;
  }

  // Sweep a whole scene [4, H, W] tile by tile; returns the change probability map.
  torch::Tensor predict_scene(const torch::Tensor &before_scene, const torch::Tensor &after_scene) {
    net_->eval();
    const int64_t rows = before_scene.size(1) / kTile, cols = before_scene.size(2) / kTile;
    auto out = torch::zeros({rows * kTile, cols * kTile});
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        auto &stage = staging_[static_cast<size_t>(r * cols + c) % staging_.size()];
        stage[0].copy_(before_scene.narrow(1, r * kTile, kTile).narrow(2, c * kTile, kTile));
        stage[1].copy_(after_scene.narrow(1, r * kTile, kTile).narrow(2, c * kTile, kTile));
        // OK(torch-non-blocking-pageable): the staging tiles are pinned
        // whenever the trainer runs on a GPU.
        auto pair = stage.to(device_, /*non_blocking=*/true);
        // BUG(torch-inference-without-no-grad): eval() but no guard; every
        // tile of the scene records its activations for autograd.
        auto logits = net_->forward(pair.narrow(0, 0, 1), pair.narrow(0, 1, 1));
        out.narrow(0, r * kTile, kTile).narrow(1, c * kTile, kTile).copy_(torch::sigmoid(logits)[0][0].cpu());
      }
    }
    return out;
  }

 private:
  double smoothed_loss() const {
    const size_t filled = std::min<size_t>(slot_, recent_.size());
    auto sum = std::accumulate(recent_.begin(), recent_.begin() + static_cast<std::ptrdiff_t>(filled),
                               torch::zeros({}, torch::TensorOptions().device(device_)),
                               [](const torch::Tensor &acc, const torch::Tensor &l) { return acc + l; });
    // BUG(torch-host-sync-in-loop): run_epoch calls this after every training
    // step; the sum of the ring lives on device_ and is read back each time.
    return sum.item<double>() / static_cast<double>(filled);
  }

  torch::Device device_;
  SiameseChangeNet net_;
  torch::optim::Adam opt_;
  torch::Tensor border_weights_;
  int64_t accum_;
  std::function<void(int64_t, double)> on_progress_;
  std::map<std::string, Metric> metrics_;
  std::array<torch::Tensor, 8> recent_;
  std::array<torch::Tensor, 2> staging_;
  size_t slot_ = 0;
  int64_t micro_ = 0;
  double best_smoothed_ = std::numeric_limits<double>::infinity();
};

int main() {
  torch::manual_seed(206);
  ChangeOptions opts;
  opts.device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  opts.border_weights = torch::ones({1, 1, kTile, kTile});
  opts.border_weights.narrow(2, 0, 4).fill_(0.25);
  opts.border_weights.narrow(2, kTile - 4, 4).fill_(0.25);
  opts.accum_steps = 4;
  opts.on_progress = [](int64_t step, double best) { std::cout << "step " << step << " best " << best << "\n"; };
  ChangeTrainer trainer(opts);

  std::vector<TilePair> train_set, val_set;
  for (int i = 0; i < 64; ++i)
    train_set.push_back(synthetic_pairs(kBatch));
  for (int i = 0; i < 8; ++i)
    val_set.push_back(synthetic_pairs(kBatch));

  for (int epoch = 0; epoch < 10; ++epoch) {
    const double best = trainer.run_epoch(Phase::kTrain, train_set);
    const double errors = trainer.run_epoch(Phase::kValidate, val_set);
    std::cout << "epoch " << epoch << " best smoothed " << best << " clear-sky errors " << errors << "\n";
  }
  auto scene = synthetic_pairs(1);
  auto map = trainer.predict_scene(torch::cat({scene.before[0], scene.before[0]}, 2),
                                   torch::cat({scene.after[0], scene.after[0]}, 2));
  std::cout << "changed pixels " << (map > 0.5).sum().item<int64_t>() << "\n";
  return 0;
}
