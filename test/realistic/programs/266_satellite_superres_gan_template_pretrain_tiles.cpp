// 2x super-resolution of 4-band (RGB + near-infrared) satellite tiles for a
// field-boundary mapping service: an SRResNet-style generator is pretrained
// on L1 (PSNR-oriented, float16 autocast), then trained adversarially against
// a patch discriminator in bfloat16 with generator gradients accumulated over
// several tiles. Full scenes are upscaled tile by tile for the mapping
// pipeline; quick-look thumbnails go through a lenient path.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define SR_AMP(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#else
#define SR_AMP(on) at::autocast::set_enabled(on)
#endif

namespace amp {
inline void enable_bf16() {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
#else
  at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
#endif
  SR_AMP(true);
}
inline void disable() { SR_AMP(false); }
}  // namespace amp

constexpr int64_t kBands = 4, kHrSide = 64;

struct SrConfig {
  int64_t pretrain_epochs = 2, pretrain_accum = 4, gan_epochs = 3, g_accum = 2;
  double adv_weight = 5e-3;
};

nn::Conv2d conv3(int64_t in, int64_t out) { return nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1)); }

struct ResBlockImpl : nn::Module {
  explicit ResBlockImpl(int64_t c)
      : body(register_module("body", nn::Sequential(conv3(c, c), nn::BatchNorm2d(c), nn::PReLU(), conv3(c, c),
                                                    nn::BatchNorm2d(c)))) {}
  torch::Tensor forward(const torch::Tensor& x) { return x + body->forward(x); }
  nn::Sequential body;
};
TORCH_MODULE(ResBlock);

struct GeneratorImpl : nn::Module {
  GeneratorImpl(int64_t c, int64_t blocks)
      : head(register_module("head", conv3(kBands, c))), trunk(register_module("trunk", nn::Sequential())),
        trunk_conv(register_module("trunk_conv", conv3(c, c))), trunk_bn(register_module("trunk_bn", nn::BatchNorm2d(c))),
        up(register_module("up", nn::Sequential(conv3(c, 4 * c), nn::PixelShuffle(2), nn::PReLU()))),
        tail(register_module("tail", conv3(c, kBands))) {
    for (int64_t i = 0; i < blocks; ++i)
      trunk->push_back(ResBlock(c));
  }
  torch::Tensor forward(const torch::Tensor& lr) {
    auto h = head->forward(lr);
    auto r = trunk_bn->forward(trunk_conv->forward(trunk->forward(h)));
    return torch::sigmoid(tail->forward(up->forward(h + r)));
  }
  nn::Conv2d head;
  nn::Sequential trunk;
  nn::Conv2d trunk_conv;
  nn::BatchNorm2d trunk_bn;
  nn::Sequential up;
  nn::Conv2d tail;
};
TORCH_MODULE(Generator);

nn::Sequential patch_discriminator() {
  auto lrelu = nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2));
  return nn::Sequential(conv3(kBands, 32), lrelu, nn::Conv2d(nn::Conv2dOptions(32, 64, 4).stride(2).padding(1)),
                        nn::BatchNorm2d(64), lrelu, nn::Conv2d(nn::Conv2dOptions(64, 1, 3).padding(1)));
}

struct TilePair { torch::Tensor lr, hr; };

std::vector<TilePair> make_tiles(int64_t n, int64_t batch, torch::Device device) {
  std::vector<TilePair> out;
  for (int64_t i = 0; i < n; ++i) {
    auto hr = torch::rand({batch, kBands, kHrSide, kHrSide}, device);
    out.push_back({F::avg_pool2d(hr, F::AvgPool2dFuncOptions(2)), hr});
  }
  return out;
}

void set_requires_grad(nn::Sequential& net, bool on) {
  for (auto& p : net->parameters())
    p.set_requires_grad(on);
}

template <class Criterion>
void pretrain_psnr(Generator& gen, Criterion criterion, const std::vector<TilePair>& tiles, const SrConfig& cfg) {
  gen->train();
  torch::optim::Adam opt(gen->parameters(), torch::optim::AdamOptions(2e-4));
  int64_t micro = 0;
  for (int64_t epoch = 0; epoch < cfg.pretrain_epochs; ++epoch) {
    for (const auto& t : tiles) {
      SR_AMP(true);
      auto loss = criterion(gen->forward(t.lr), t.hr);
      SR_AMP(false);
      // BUG(torch-autocast-region): the default float16 region's mean L1
      // loss reaches backward() with no loss scale.
      // BUG(torch-grad-accumulation-unscaled): pretrain_accum mean losses
      // add up in the gradients before each step, never divided.
      loss.backward();
      if (++micro == cfg.pretrain_accum) {
        micro = 0;
        opt.step();
        opt.zero_grad();
      }
    }
  }
}

void train_gan(Generator& gen, nn::Sequential& disc, const std::vector<TilePair>& tiles, const SrConfig& cfg) {
  gen->train();
  disc->train();
  torch::optim::Adam opt_g(gen->parameters(), torch::optim::AdamOptions(1e-4));
  torch::optim::Adam opt_d(disc->parameters(), torch::optim::AdamOptions(1e-4));
  std::vector<torch::Tensor> epoch_g_losses;
  auto track = [&epoch_g_losses](const torch::Tensor& g_loss) {
    // BUG(torch-loss-accumulation-graph): the vector outlives the iteration
    // and keeps every generator step's graph until the epoch ends.
    epoch_g_losses.push_back(g_loss);
  };
  int64_t micro = 0;
  for (int64_t epoch = 0; epoch < cfg.gan_epochs; ++epoch) {
    for (const auto& t : tiles) {
      amp::enable_bf16();
      auto fake = gen->forward(t.lr);
      auto d_real = disc->forward(t.hr), d_fake = disc->forward(fake.detach());
      auto d_loss = 0.5 * (F::binary_cross_entropy_with_logits(d_real, torch::ones_like(d_real)) +
                           F::binary_cross_entropy_with_logits(d_fake, torch::zeros_like(d_fake)));
      amp::disable();
      // OK(torch-autocast-region): a bfloat16 region, closed before backward().
      d_loss.backward();
      opt_d.step();
      opt_d.zero_grad();

      set_requires_grad(disc, false);
      amp::enable_bf16();
      auto g_adv = disc->forward(fake);
      auto g_loss = (F::l1_loss(fake, t.hr) +
                     cfg.adv_weight * F::binary_cross_entropy_with_logits(g_adv, torch::ones_like(g_adv))) /
                    static_cast<double>(cfg.g_accum);
      amp::disable();
      track(g_loss);
      // OK(torch-grad-accumulation-unscaled, torch-autocast-region): divided
      // by g_accum; a bfloat16 region closed before backward().
      g_loss.backward();
      set_requires_grad(disc, true);
      if (++micro % cfg.g_accum == 0) {
        opt_g.step();
        opt_g.zero_grad();
      }
    }
    std::cout << "epoch " << epoch << " G loss " << torch::stack(epoch_g_losses).mean().item<double>() << '\n';
    epoch_g_losses.clear();
  }
}

class PsnrValidator {
 public:
  PsnrValidator(Generator& gen, const std::vector<TilePair>& val) : gen_(gen), val_(val) {}
  double run() {
    c10::InferenceMode guard;
    double sum = 0.0;
    for (const auto& t : val_) {
      // BUG(torch-eval-mode-missing): train_gan() left the generator in
      // training mode; BatchNorm normalises with each validation batch.
      auto sr = gen_->forward(t.lr).clamp(0.0, 1.0);
      const double mse = F::mse_loss(sr, t.hr).item<double>();
      sum += 10.0 * std::log10(1.0 / std::max(mse, 1e-10));
    }
    return sum / static_cast<double>(val_.size());
  }
 private:
  Generator& gen_;
  const std::vector<TilePair>& val_;
};

// Upscales a whole scene tile by tile; its sides must be multiples of `tile`.
torch::Tensor upscale_scene(Generator& gen, const torch::Tensor& scene, int64_t tile) {
  torch::NoGradGuard no_grad;
  auto check_tile = [tile](const torch::Tensor& t) {
    if (t.size(-1) != tile || t.size(-2) != tile)
      throw std::invalid_argument("scene sides must be multiples of the tile size");
  };
  std::vector<torch::Tensor> rows;
  // BUG(torch-autocast-region): check_tile() throws on a ragged scene with
  // autocast still on; the mapping worker's thread stays in reduced precision.
  SR_AMP(true);
  for (int64_t y = 0; y < scene.size(-2); y += tile) {
    std::vector<torch::Tensor> row;
    for (int64_t x = 0; x < scene.size(-1); x += tile) {
      auto t = scene.slice(-2, y, y + tile).slice(-1, x, x + tile);
      check_tile(t);
      row.push_back(gen->forward(t).to(torch::kFloat));
    }
    rows.push_back(torch::cat(row, -1));
  }
  SR_AMP(false);
  return torch::cat(rows, -2);
}

// Quick-look thumbnails: a malformed one is logged and skipped.
int64_t upscale_thumbnails(Generator& gen, const std::vector<torch::Tensor>& thumbs) {
  torch::NoGradGuard no_grad;
  int64_t done = 0;
  for (const auto& t : thumbs) {
    // OK(torch-autocast-region): the throw is caught by this function's own
    // try block, and the switch-off below runs on every path.
    SR_AMP(true);
    try {
      if (t.dim() != 4 || t.size(1) != kBands)
        throw std::invalid_argument("thumbnail must be [N, 4, H, W]");
      done += gen->forward(t).size(0);
    } catch (const std::invalid_argument& e) {
      std::cerr << "skipped thumbnail: " << e.what() << '\n';
    }
    SR_AMP(false);
  }
  return done;
}

int main() {
  torch::manual_seed(266);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  SrConfig cfg;
  auto tiles = make_tiles(64, 8, device), val = make_tiles(8, 8, device);
  Generator gen(64, 6);
  gen->to(device);
  auto disc = patch_discriminator();
  disc->to(device);
  pretrain_psnr(gen, nn::L1Loss(), tiles, cfg);
  train_gan(gen, disc, tiles, cfg);
  PsnrValidator validator(gen, val);
  std::cout << "validation PSNR " << validator.run() << " dB\n";

  gen->eval();
  try {
    auto sr = upscale_scene(gen, torch::rand({1, kBands, 96, 96}, device), 32);
    std::cout << "scene upscaled to " << sr.size(-2) << "x" << sr.size(-1) << '\n';
  } catch (const std::invalid_argument& e) {
    std::cerr << "scene rejected: " << e.what() << '\n';
  }
  std::vector<torch::Tensor> thumbs = {torch::rand({2, kBands, 24, 24}, device), torch::rand({2, 3, 24, 24}, device)};
  std::cout << "thumbnails upscaled: " << upscale_thumbnails(gen, thumbs) << '\n';
}
