// Weather radar super-resolution: 4 km reflectivity composites (32x32 tiles,
// dBZ / 60) are upsampled 4x to a research radar's 1 km grid by a residual
// conv stack with PixelShuffle. A Trainer base class's fit() loops over
// epochs and tiles, calls the virtual step(), and ends each epoch with
// flush() for a last partial group. Two subclasses implement step(): plain
// L1, and a storm-weighted loss for tiles that carry a storm mask. Both
// accumulate gradients over AccumConfig::accum_steps tiles.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kCoarse = 32, kScale = 4, kFine = kCoarse * kScale;

torch::Tensor bilinear_to_fine(const torch::Tensor &x) {
  auto opts = F::InterpolateFuncOptions().size(std::vector<int64_t>{kFine, kFine}).mode(torch::kBilinear);
  return F::interpolate(x, opts.align_corners(false));
}

struct RadarSRImpl : torch::nn::Module {
  RadarSRImpl()
      : head(register_module("head", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 48, 3).padding(1)))),
        up(register_module("up", torch::nn::Conv2d(torch::nn::Conv2dOptions(48, kScale * kScale, 3).padding(1)))),
        body(register_module(
            "body", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(48, 48, 3).padding(1)),
                                          torch::nn::BatchNorm2d(48), torch::nn::ReLU(),
                                          torch::nn::Conv2d(torch::nn::Conv2dOptions(48, 48, 3).padding(1)),
                                          torch::nn::BatchNorm2d(48)))),
        shuffle(register_module("shuffle", torch::nn::PixelShuffle(kScale))) {}

  // coarse [B, 1, 32, 32] -> fine [B, 1, 128, 128]
  torch::Tensor forward(const torch::Tensor &coarse) {
    auto h = torch::relu(head->forward(coarse));
    h = h + body->forward(h);
    return bilinear_to_fine(coarse) + shuffle->forward(up->forward(h));
  }

  torch::nn::Conv2d head, up;
  torch::nn::Sequential body;
  torch::nn::PixelShuffle shuffle;
};
TORCH_MODULE(RadarSR);

struct Tile {
  torch::Tensor coarse, fine, storm_mask;  // storm_mask is undefined on stratiform tiles
};

struct AccumConfig {
  int64_t accum_steps = 4;
  double lr = 2e-4;
};

// Smooth stratiform rain plus a few sharp convective cores.
std::vector<Tile> make_tiles(int64_t count, int64_t batch, torch::Device device, bool with_masks) {
  std::vector<Tile> tiles;
  for (int64_t i = 0; i < count; ++i) {
    auto field = bilinear_to_fine(torch::rand({batch, 1, kFine / 16, kFine / 16}, device));
    auto cores = (torch::rand({batch, 1, kFine, kFine}, device) > 0.999).to(torch::kFloat);
    cores = F::max_pool2d(cores, F::MaxPool2dFuncOptions(7).stride(1).padding(3));
    auto fine = torch::clamp(0.6 * field + 0.4 * cores, 0.0, 1.0);
    Tile tile{F::avg_pool2d(fine, F::AvgPool2dFuncOptions(kScale)), fine, torch::Tensor()};
    if (with_masks && i % 2 == 0)
      tile.storm_mask = (fine > 0.58).to(torch::kFloat);  // about 35 dBZ
    tiles.push_back(tile);
  }
  return tiles;
}

// Divides a micro-batch loss so that n of them add up to one batch mean.
torch::Tensor scaled(const torch::Tensor &loss, int64_t n) { return loss / static_cast<double>(n); }

// Per-step training loss, averaged at the end of each epoch.
class LossCurve {
 public:
  void record(const torch::Tensor &loss) {
    // OK(torch-loss-accumulation-graph): the curve keeps detached values.
    points_.push_back(loss.detach());
  }
  torch::Tensor close_epoch() {
    auto mean = torch::stack(points_).mean();
    points_.clear();
    return mean;
  }

 private:
  std::vector<torch::Tensor> points_;
};

class Trainer {
 public:
  Trainer(RadarSR net, const AccumConfig &cfg, std::string name)
      : net_(std::move(net)), cfg_(cfg), opt_(net_->parameters(), torch::optim::AdamOptions(cfg.lr)),
        name_(std::move(name)) {}
  virtual ~Trainer() = default;

  void fit(std::vector<Tile> &tiles, int64_t epochs) {
    net_->train();
    opt_.zero_grad();
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      for (auto &tile : tiles)
        step(tile);
      flush();
      epoch_means_.push_back(curve_.close_epoch());
    }
  }

  void report() const {
    std::cout << name_ << " epoch L1: " << torch::stack(epoch_means_).cpu() << '\n';
  }

 protected:
  virtual void step(Tile &tile) = 0;

  // Applies the gradients of a last, partial group of micro-batches.
  virtual void flush() {
    if (micro_ % cfg_.accum_steps != 0) {
      // OK(torch-missing-zero-grad): the partial group is cleared after its step.
      opt_.step();
      opt_.zero_grad();
    }
    micro_ = 0;
  }

  bool boundary() { return ++micro_ % cfg_.accum_steps == 0; }

  RadarSR net_;
  AccumConfig cfg_;
  torch::optim::Adam opt_;
  LossCurve curve_;
  int64_t micro_ = 0;

 private:
  std::string name_;
  std::vector<torch::Tensor> epoch_means_;
};

class L1Trainer : public Trainer {
 public:
  L1Trainer(RadarSR net, const AccumConfig &cfg) : Trainer(std::move(net), cfg, "l1") {}

 protected:
  void step(Tile &tile) override {
    auto loss = F::l1_loss(net_->forward(tile.coarse), tile.fine);
    curve_.record(loss);
    // OK(torch-grad-accumulation-unscaled): scaled() divides by accum_steps.
    scaled(loss, cfg_.accum_steps).backward();
    if (boundary()) {
      opt_.step();
      opt_.zero_grad();
    }
  }
};

class StormWeightedTrainer : public Trainer {
 public:
  StormWeightedTrainer(RadarSR net, const AccumConfig &cfg) : Trainer(std::move(net), cfg, "storm") {}

  double storm_loss() const {
    torch::NoGradGuard no_grad;
    return storm_losses_.empty() ? 0.0 : torch::stack(storm_losses_).mean().item<double>();
  }

 protected:
  void step(Tile &tile) override {
    auto pred = net_->forward(tile.coarse);
    if (tile.storm_mask.defined()) {
      auto weights = 1.0 + 4.0 * tile.storm_mask;
      auto loss = (weights * (pred - tile.fine).abs()).mean();
      // BUG(torch-loss-accumulation-graph): the storm loss is kept with its
      // graph for the whole run, one graph per storm tile.
      storm_losses_.push_back(loss);
      // OK(torch-grad-accumulation-unscaled): the storm path divides.
      scaled(loss, cfg_.accum_steps).backward();
    } else {
      auto loss = F::l1_loss(pred, tile.fine);
      curve_.record(loss);
      // BUG(torch-grad-accumulation-unscaled): the stratiform path forgot
      // scaled(): its gradients count accum_steps times too much.
      loss.backward();
    }
    if (boundary()) {
      opt_.step();
      opt_.zero_grad();
    }
  }

  void flush() override {
    if (micro_ % cfg_.accum_steps != 0) {
      // BUG(torch-missing-zero-grad): the partial group's gradients are
      // applied but never cleared; the next epoch's first group adds to them.
      opt_.step();
    }
    micro_ = 0;
  }

 private:
  std::vector<torch::Tensor> storm_losses_;
};

// Mean L1 and critical success index at 35 dBZ on held-out tiles.
std::pair<double, double> validate(RadarSR &net, const std::vector<Tile> &tiles) {
  torch::NoGradGuard no_grad;
  net->eval();
  std::vector<torch::Tensor> errors;
  double hits = 0, misses = 0, false_alarms = 0;
  for (const auto &tile : tiles) {
    // OK(torch-eval-mode-missing): eval() above; BatchNorm uses its running stats.
    auto pred = net->forward(tile.coarse);
    // OK(torch-loss-accumulation-graph): no graph under the NoGradGuard.
    errors.push_back(F::l1_loss(pred, tile.fine));
    auto p = pred > 0.58, o = tile.fine > 0.58;
    hits += (p & o).sum().item<double>();
    misses += (~p & o).sum().item<double>();
    false_alarms += (p & ~o).sum().item<double>();
  }
  const double csi = hits / std::max(1.0, hits + misses + false_alarms);
  return {torch::stack(errors).mean().item<double>(), csi};
}

int main() {
  torch::manual_seed(228);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  auto train_tiles = make_tiles(48, 8, device, true);
  auto val_tiles = make_tiles(6, 16, device, false);
  AccumConfig cfg;

  RadarSR l1_net;
  l1_net->to(device);
  L1Trainer l1(l1_net, cfg);
  l1.fit(train_tiles, 3);
  l1.report();
  auto l1_val = validate(l1_net, val_tiles);
  std::cout << "l1 val L1 " << l1_val.first << " CSI " << l1_val.second << '\n';

  RadarSR storm_net;
  storm_net->to(device);
  StormWeightedTrainer storm(storm_net, cfg);
  storm.fit(train_tiles, 3);
  storm.report();
  auto storm_val = validate(storm_net, val_tiles);
  std::cout << "storm val L1 " << storm_val.first << " CSI " << storm_val.second << " storm loss "
            << storm.storm_loss() << '\n';
}
