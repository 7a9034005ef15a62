// Pedestrian and cyclist detection from the roof LiDAR of a sidewalk delivery
// robot: sweeps arrive pillarised into 8-channel bird's-eye-view grids; a conv
// backbone with an anchor head scores and regresses boxes. The trainer
// switches float16 autocast in begin_amp()/end_amp() methods, scales the loss
// with its own LossScaler and accumulates scenes. Then a night-time head
// fine-tune, a velocity head on the frozen detector, and the deploy path.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define BEV_AMP_SET(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#else
#define BEV_AMP_SET(on) at::autocast::set_enabled(on)
#endif

constexpr int64_t kBevChannels = 8, kGrid = 64, kAnchors = 2, kBoxDims = 7, kFeat = 128;

struct DetectorConfig {
  int64_t epochs = 3, accum = 4 /* scenes per optimizer step */, warmup_steps = 50;
  double lr = 2e-3, loss_scale = 1024.0;
};

// Static loss scaling for float16 regions (LibTorch has no GradScaler).
class LossScaler {
 public:
  explicit LossScaler(double scale) : scale_(scale) {}
  torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }
  void unscale(const std::vector<torch::Tensor>& params) const {
    for (const auto& p : params)
      if (p.grad().defined())
        p.grad().div_(scale_);
  }
 private:
  double scale_;
};

struct DetOut { torch::Tensor cls, box; };  // [B, A, H, W], [B, A * 7, H, W]

struct BevNetImpl : nn::Module {
  BevNetImpl()
      : backbone(register_module(
            "backbone",
            nn::Sequential(nn::Conv2d(nn::Conv2dOptions(kBevChannels, 64, 3).padding(1)), nn::BatchNorm2d(64),
                           nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(64, kFeat, 3).padding(1)),
                           nn::BatchNorm2d(kFeat), nn::ReLU()))),
        cls_head(register_module("cls_head", nn::Conv2d(kFeat, kAnchors, 1))),
        box_head(register_module("box_head", nn::Conv2d(kFeat, kAnchors * kBoxDims, 1))) {}
  DetOut forward(const torch::Tensor& bev) {
    auto f = backbone->forward(bev);
    return {cls_head->forward(f), box_head->forward(f)};
  }
  nn::Sequential backbone;
  nn::Conv2d cls_head, box_head;
};
TORCH_MODULE(BevNet);

struct Scene { torch::Tensor bev, cls_target, box_target, velocity; };

std::vector<Scene> make_scenes(int64_t n, int64_t batch, torch::Device device) {
  std::vector<Scene> out;
  auto opts = torch::TensorOptions().device(device);
  for (int64_t i = 0; i < n; ++i) {
    auto cls = (torch::rand({batch, kAnchors, kGrid, kGrid}, opts) < 0.01).to(torch::kFloat);
    out.push_back({torch::randn({batch, kBevChannels, kGrid, kGrid}, opts), cls,
                   torch::randn({batch, kAnchors * kBoxDims, kGrid, kGrid}, opts), torch::randn({batch, 2}, opts)});
  }
  return out;
}

class DetTrainer {
 public:
  DetTrainer(BevNet net, const DetectorConfig& cfg)
      : net_(std::move(net)), cfg_(cfg), opt_(net_->parameters(), torch::optim::AdamWOptions(cfg.lr)),
        scaler_(cfg.loss_scale) {}

  void fit(const std::vector<Scene>& scenes) {
    net_->train();
    opt_.zero_grad();
    for (int64_t epoch = 0; epoch < cfg_.epochs; ++epoch)
      for (const auto& s : scenes)
        train_step(s);
  }
  BevNet model() const { return net_; }

 private:
  void begin_amp() { BEV_AMP_SET(true); }
  void end_amp() { BEV_AMP_SET(false); }

  // Sum over anchors, normalised by the number of positive anchors.
  torch::Tensor detection_loss(const DetOut& out, const Scene& s) const {
    auto cls = F::binary_cross_entropy_with_logits(
        out.cls, s.cls_target, F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kSum));
    auto pos = s.cls_target.repeat_interleave(kBoxDims, 1);
    auto box = F::smooth_l1_loss(out.box * pos, s.box_target * pos, F::SmoothL1LossFuncOptions().reduction(torch::kSum));
    return (cls + 2.0 * box) / s.cls_target.sum().clamp_min(1.0);
  }

  void backprop(const torch::Tensor& loss) {
    // BUG(torch-autocast-region): train_step() calls this before end_amp(),
    // so the backward pass runs inside the autocast region.
    // OK(torch-grad-accumulation-unscaled): sum-reduced, divided by the
    // positive count, and multiplied by the loss scale.
    scaler_.scale(loss).backward();
  }

  void train_step(const Scene& s) {
    begin_amp();
    auto out = net_->forward(s.bev);
    auto loss = detection_loss(out, s);
    backprop(loss);
    end_amp();
    if (++micro_ % cfg_.accum == 0) {
      scaler_.unscale(net_->parameters());
      opt_.step();
      opt_.zero_grad();
    }
  }

  BevNet net_;
  DetectorConfig cfg_;
  torch::optim::AdamW opt_;
  LossScaler scaler_;
  int64_t micro_ = 0;
};

struct HeadLosses { nn::BCEWithLogitsLoss cls; nn::SmoothL1Loss box; };

// Night-time fine-tune of the heads on the frozen backbone.
void finetune_heads(BevNet& net, const std::vector<Scene>& scenes, const DetectorConfig& cfg) {
  for (auto& p : net->backbone->parameters())
    p.set_requires_grad(false);
  auto params = net->cls_head->parameters();
  for (const auto& p : net->box_head->parameters())
    params.push_back(p);
  torch::optim::SGD opt(params, torch::optim::SGDOptions(cfg.lr).momentum(0.9));
  HeadLosses losses;
  net->train();
  opt.zero_grad();
  int64_t updates = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(scenes.size()); ++i) {
    auto out = net->forward(scenes[i].bev);
    auto loss = losses.cls(out.cls, scenes[i].cls_target) + losses.box(out.box, scenes[i].box_target);
    if (updates < cfg.warmup_steps)
      loss = loss * (static_cast<double>(updates + 1) / static_cast<double>(cfg.warmup_steps));
    // BUG(torch-grad-accumulation-unscaled): after the warm-up ramp the sum
    // of two mean losses reaches backward() undivided, and cfg.accum scenes
    // add up before each step.
    loss.backward();
    if ((i + 1) % cfg.accum == 0) {
      opt.step();
      opt.zero_grad();
      ++updates;
    }
  }
}

// Fraction of ground-truth anchors scored above `thresh`.
double anchor_recall(BevNet net, const std::vector<Scene>& val, double thresh) {
  torch::NoGradGuard no_grad;
  int64_t hit = 0, total = 0;
  for (const auto& s : val) {
    // BUG(torch-eval-mode-missing): the trainer left the detector in
    // training mode; BatchNorm uses the validation batch's statistics.
    auto out = net->forward(s.bev);
    auto gt = s.cls_target > 0.5;
    hit += ((torch::sigmoid(out.cls) > thresh) & gt).sum().item<int64_t>();
    total += gt.sum().item<int64_t>();
  }
  return total > 0 ? static_cast<double>(hit) / static_cast<double>(total) : 0.0;
}

// Regresses object velocity from the frozen detector's pooled features.
class VelocityCalibrator {
 public:
  VelocityCalibrator(BevNet detector, torch::Device device)
      : detector_(std::move(detector)), head_(nn::Linear(kFeat, 2)),
        opt_(head_->parameters(), torch::optim::SGDOptions(1e-2).momentum(0.9)) {
    head_->to(device);
  }
  void begin_epoch() { seen_ = 0; opt_.zero_grad(); }
  void step(const Scene& s) {
    torch::Tensor feats;
    {
      torch::NoGradGuard no_grad;
      feats = detector_->backbone->forward(s.bev).mean({2, 3});
    }
    auto loss = F::mse_loss(head_->forward(feats), s.velocity);
    loss.backward();
    // BUG(torch-missing-zero-grad): the gradients are only reset in
    // begin_epoch(), so every step applies the sum of the epoch's gradients.
    opt_.step();
    ++seen_;
  }
  int64_t seen() const { return seen_; }

 private:
  BevNet detector_;
  nn::Linear head_;
  torch::optim::SGD opt_;
  int64_t seen_ = 0;
};

void check_sweep(const torch::Tensor& bev) {
  if (bev.dim() != 4 || bev.size(1) != kBevChannels)
    throw std::invalid_argument("expected a [N, 8, H, W] pillar grid");
}

// Number of anchors the planner receives for one sweep.
int64_t detect(BevNet& net, const torch::Tensor& bev, double thresh) {
  torch::NoGradGuard no_grad;
  // BUG(torch-autocast-region): check_sweep() throws on a malformed sweep
  // while autocast is on; the planner's thread stays in float16.
  BEV_AMP_SET(true);
  check_sweep(bev);
  auto out = net->forward(bev);
  BEV_AMP_SET(false);
  auto scores = torch::sigmoid(out.cls.to(torch::kFloat));
  // OK(torch-autocast-region): this throw comes after the switch-off.
  if (!torch::isfinite(scores).all().item<bool>())
    throw std::runtime_error("non-finite detection scores");
  return (scores > thresh).sum().item<int64_t>();
}

int main() {
  torch::manual_seed(265);
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  DetectorConfig cfg;
  auto train = make_scenes(80, 4, device), night = make_scenes(40, 4, device), val = make_scenes(10, 4, device);

  BevNet net;
  net->to(device);
  DetTrainer trainer(net, cfg);
  trainer.fit(train);
  finetune_heads(net, night, cfg);
  std::cout << "anchor recall " << anchor_recall(trainer.model(), val, 0.5) << '\n';

  net->eval();
  VelocityCalibrator calib(net, device);
  for (int epoch = 0; epoch < 5; ++epoch) {
    calib.begin_epoch();
    for (const auto& s : train)
      calib.step(s);
  }
  std::cout << "velocity steps " << calib.seen() << '\n';

  try {
    std::cout << "anchors above 0.3: " << detect(net, val.front().bev, 0.3) << '\n';
  } catch (const std::exception& e) {
    std::cerr << "sweep rejected: " << e.what() << '\n';
  }
}
