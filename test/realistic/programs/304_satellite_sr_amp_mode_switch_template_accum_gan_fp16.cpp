// Super-resolution of Sentinel-2 tiles: 40 m bands are upsampled x4 to the
// 10 m grid by a residual network with a pixel-shuffle head. Pixel-loss
// pretraining accumulates micro-batches (the accumulation is a template
// parameter, tiles are large) under bfloat16 autocast on the A100 partition;
// the adversarial fine-tune runs on the V100 partition in float16; a final
// adaptation to the PlanetScope sensor clips gradients before each update.
// The autocast mode is a config enum switched on by an AMP context object.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace amp {
#if TORCH_VERSION_MAJOR >= 2
inline void enable(bool on) { at::autocast::set_autocast_enabled(at::kCUDA, on); }
inline void set_dtype(at::ScalarType t) { at::autocast::set_autocast_dtype(at::kCUDA, t); }
#else
inline void enable(bool on) { at::autocast::set_enabled(on); }
inline void set_dtype(at::ScalarType t) { at::autocast::set_autocast_gpu_dtype(t); }
#endif
}  // namespace amp

enum class AmpMode { Off, Fp16, Bf16 };

// Opens and closes one autocast region in the mode the run was configured with.
struct AmpContext {
  AmpMode mode = AmpMode::Off;
  void enter() {
    switch (mode) {
      case AmpMode::Off: return;
      case AmpMode::Fp16: amp::set_dtype(at::kHalf); break;
      case AmpMode::Bf16: amp::set_dtype(at::kBFloat16); break;
    }
    amp::enable(true);
  }
  void exit() { amp::enable(false); }
};

struct SrConfig {
  AmpMode amp = AmpMode::Bf16;
  double lr = 2e-4, loss_scale = 1024.0;
};

struct Tile {
  torch::Tensor lr, hr;      // [B, 4, 32, 32], [B, 4, 128, 128]
  torch::Tensor cloud_mask;  // [B, 1, 128, 128], 1 = clear sky; undefined when the scene has no mask
};

struct ResBlockImpl : nn::Module {
  nn::Conv2d c1{nn::Conv2dOptions(64, 64, 3).padding(1)}, c2{nn::Conv2dOptions(64, 64, 3).padding(1)};
  ResBlockImpl() { register_module("c1", c1); register_module("c2", c2); }
  torch::Tensor forward(const torch::Tensor& x) { return x + 0.2 * c2(torch::relu(c1(x))); }
};
TORCH_MODULE(ResBlock);

struct SrNetImpl : nn::Module {
  SrNetImpl() {
    head = register_module("head", nn::Conv2d(nn::Conv2dOptions(4, 64, 3).padding(1)));
    for (int i = 0; i < 6; ++i) body->push_back(ResBlock());
    register_module("body", body);
    up = register_module("up", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(64, 64 * 16, 3).padding(1)),
                                              nn::PixelShuffle(4), nn::Conv2d(nn::Conv2dOptions(64, 4, 3).padding(1))));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto f = head(x);
    return up->forward(f + body->forward(f));
  }
  nn::Conv2d head{nullptr};
  nn::Sequential body, up{nullptr};
};
TORCH_MODULE(SrNet);

struct CriticImpl : nn::Module {
  CriticImpl() : net(register_module("net", nn::Sequential(
                     nn::Conv2d(nn::Conv2dOptions(4, 32, 4).stride(2).padding(1)), nn::LeakyReLU(),
                     nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(32, 1)))) {}
  torch::Tensor forward(const torch::Tensor& x) { return net->forward(x).squeeze(1); }
  nn::Sequential net;
};
TORCH_MODULE(Critic);

// Mean absolute error over the clear-sky pixels only.
torch::Tensor masked_l1(const torch::Tensor& sr, const torch::Tensor& hr, const torch::Tensor& mask) {
  return ((sr - hr).abs() * mask).sum() / (mask.sum() * sr.size(1)).clamp_min(1.0);
}

// Averages a micro-batch loss over the micro-batches of one update.
torch::Tensor scale_for_accum(const torch::Tensor& loss, int steps) { return loss / static_cast<double>(steps); }

struct EpochStats { torch::Tensor l1; };

template <int Accum>
class PixelTrainer {
 public:
  PixelTrainer(SrNet net, const SrConfig& cfg, torch::Device device)
      : net_(net), ctx_{cfg.amp}, device_(device), opt_(net_->parameters(), torch::optim::AdamOptions(cfg.lr)),
        sched_(opt_, /*step_size=*/2, /*gamma=*/0.5) {}
  void fit(const std::vector<Tile>& tiles, int epochs) {
    net_->train();
    for (int epoch = 0; epoch < epochs; ++epoch) {
      begin_epoch();
      for (const auto& t : tiles) train_on(t);
      // OK(torch-missing-zero-grad): StepLR's step() changes the learning rate, it applies no gradients.
      sched_.step();
      // OK(torch-host-sync-in-loop): once per epoch, after the micro-batch loop.
      std::cout << "epoch " << epoch << " l1 " << stats_.l1.item<double>() / tiles.size() << '\n';
    }
  }
 private:
  void begin_epoch() {
    micro_ = 0;
    opt_.zero_grad();
    stats_.l1 = torch::zeros({}, torch::TensorOptions().device(device_));
  }
  void flush() {
    opt_.step();
    opt_.zero_grad();
    micro_ = 0;
  }
  void train_on(const Tile& t) {
    ctx_.enter();
    auto sr = net_->forward(t.lr);
    torch::Tensor loss;
    if (t.cloud_mask.defined())
      loss = scale_for_accum(masked_l1(sr, t.hr, t.cloud_mask), Accum);
    else
      loss = torch::l1_loss(sr, t.hr);
    ctx_.exit();
    // BUG(torch-grad-accumulation-unscaled): the unmasked branch forgot
    // scale_for_accum(): Accum mean losses add up before flush() steps.
    // OK(torch-autocast-region): bfloat16 region (the pretraining config), closed above.
    loss.backward();
    // BUG(torch-loss-accumulation-graph): the struct field outlives the step and keeps every graph.
    stats_.l1 += loss;
    if (++micro_ == Accum)
      flush();
  }
  SrNet net_;
  AmpContext ctx_;
  torch::Device device_;
  torch::optim::Adam opt_;
  torch::optim::StepLR sched_;
  EpochStats stats_;
  int micro_ = 0;
};

class GanTuner {
 public:
  GanTuner(SrNet gen, Critic critic, const SrConfig& cfg)
      : gen_(gen), critic_(critic), ctx_{cfg.amp}, scale_(cfg.loss_scale),
        g_opt_(gen_->parameters(), torch::optim::AdamOptions(cfg.lr).betas({0.9, 0.99})),
        d_opt_(critic_->parameters(), torch::optim::AdamOptions(cfg.lr).betas({0.9, 0.99})) {}
  void step(const Tile& t) {
    ctx_.enter();
    auto fake = gen_->forward(t.lr);
    auto real_logit = critic_->forward(t.hr);
    auto fake_logit = critic_->forward(fake.detach());
    auto d_loss = F::binary_cross_entropy_with_logits(real_logit, torch::ones_like(real_logit)) +
                  F::binary_cross_entropy_with_logits(fake_logit, torch::zeros_like(fake_logit));
    ctx_.exit();
    d_opt_.zero_grad();
    // BUG(torch-autocast-region): the critic's loss was computed in the
    // float16 region (the fine-tune config) and is backpropagated unscaled.
    d_loss.backward();
    d_opt_.step();
    g_opt_.zero_grad();
    ctx_.enter();
    auto adv = critic_->forward(fake);
    auto g_loss = torch::l1_loss(fake, t.hr) + 1e-3 * F::binary_cross_entropy_with_logits(adv, torch::ones_like(adv));
    // BUG(torch-autocast-region): scaled, but still inside the region: exit() comes after it.
    (g_loss * scale_).backward();
    ctx_.exit();
    for (auto& p : gen_->parameters())
      if (p.grad().defined()) p.mutable_grad().div_(scale_);
    g_opt_.step();
  }
 private:
  SrNet gen_;
  Critic critic_;
  AmpContext ctx_;
  double scale_;
  torch::optim::Adam g_opt_, d_opt_;
};

void apply_update(torch::optim::Optimizer& opt, const std::vector<torch::Tensor>& params, double max_norm) {
  nn::utils::clip_grad_norm_(params, max_norm);
  // BUG(torch-missing-zero-grad): adapt_to_sensor() resets once, before its
  // loops; every later update adds all earlier PlanetScope gradients.
  opt.step();
}

void adapt_to_sensor(SrNet& net, const std::vector<Tile>& tiles) {
  auto params = net->parameters();
  torch::optim::SGD opt(params, torch::optim::SGDOptions(1e-4).momentum(0.9));
  opt.zero_grad();
  for (int round = 0; round < 2; ++round)
    for (const auto& t : tiles) {
      auto loss = torch::l1_loss(net->forward(t.lr), t.hr);
      loss.backward();
      apply_update(opt, params, 0.5);
    }
}

double psnr(SrNet& net, const std::vector<Tile>& tiles) {
  net->eval();
  torch::NoGradGuard no_grad;
  double total = 0.0;
  for (const auto& t : tiles) {
    // OK(torch-inference-without-no-grad, torch-eval-mode-missing): guard and eval() above.
    auto mse = torch::mse_loss(net->forward(t.lr).clamp(0, 1), t.hr).item<double>();
    total += 10.0 * std::log10(1.0 / std::max(mse, 1e-10));
  }
  net->train();
  return total / static_cast<double>(tiles.size());
}

std::vector<Tile> make_tiles(int n, int64_t batch, bool masked, torch::Device device) {
  std::vector<Tile> out;
  auto opts = torch::TensorOptions().device(device);
  for (int i = 0; i < n; ++i)
    out.push_back({torch::rand({batch, 4, 32, 32}, opts), torch::rand({batch, 4, 128, 128}, opts),
                   masked && i % 3 == 0 ? (torch::rand({batch, 1, 128, 128}, opts) > 0.2).to(torch::kFloat)
                                        : torch::Tensor()});
  return out;
}

int main() {
  torch::manual_seed(304);
  // OK(torch-cuda-unguarded): guarded selection.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  auto train = make_tiles(24, 4, /*masked=*/true, device);
  auto val = make_tiles(4, 4, /*masked=*/false, device);
  SrNet net;
  net->to(device);
  SrConfig pretrain_cfg;  // A100 partition: bfloat16
  PixelTrainer<4> pixel(net, pretrain_cfg, device);
  pixel.fit(train, 3);
  std::cout << "PSNR after pretraining " << psnr(net, val) << " dB\n";

  SrConfig gan_cfg;
  gan_cfg.amp = AmpMode::Fp16;  // V100 partition: no bfloat16
  gan_cfg.lr = 1e-4;
  Critic critic;
  critic->to(device);
  GanTuner tuner(net, critic, gan_cfg);
  for (const auto& t : train) tuner.step(t);
  std::cout << "PSNR after GAN fine-tune " << psnr(net, val) << " dB\n";

  adapt_to_sensor(net, make_tiles(8, 2, /*masked=*/false, device));
  std::cout << "PSNR on PlanetScope " << psnr(net, val) << " dB\n";
}
