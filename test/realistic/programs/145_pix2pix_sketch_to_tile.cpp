// Pix2Pix: turns edge sketches into coloured map tiles. A small U-Net
// generator (BatchNorm, Dropout in the decoder) against a PatchGAN
// discriminator, each with its own Adam. The discriminator's gradients are
// accumulated over two steps because it overpowers the generator early; the
// generator's adversarial pass runs under a bfloat16 autocast scope. A
// sanity validation runs before training, like Lightning's.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kSide = 32;

torch::nn::Conv2dOptions down(int64_t in, int64_t out) { return torch::nn::Conv2dOptions(in, out, 4).stride(2).padding(1); }
torch::nn::ConvTranspose2dOptions up(int64_t in, int64_t out) {
  return torch::nn::ConvTranspose2dOptions(in, out, 4).stride(2).padding(1);
}

struct GeneratorImpl : torch::nn::Module {
  GeneratorImpl()
      : e1(register_module("e1", torch::nn::Conv2d(down(1, 32)))),
        e2(register_module("e2", torch::nn::Conv2d(down(32, 64)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(64))),
        d1(register_module("d1", torch::nn::ConvTranspose2d(up(64, 32)))),
        bn3(register_module("bn3", torch::nn::BatchNorm2d(32))),
        drop(register_module("drop", torch::nn::Dropout(0.5))),
        d2(register_module("d2", torch::nn::ConvTranspose2d(up(64, 3)))) {}
  // sketch [B, 1, 32, 32] -> tile [B, 3, 32, 32] in [-1, 1]
  torch::Tensor forward(const torch::Tensor &sketch) {
    auto h1 = F::leaky_relu(e1(sketch), F::LeakyReLUFuncOptions().negative_slope(0.2));
    auto h2 = F::leaky_relu(bn2(e2(h1)), F::LeakyReLUFuncOptions().negative_slope(0.2));
    auto u1 = drop(torch::relu(bn3(d1(h2))));
    return torch::tanh(d2(torch::cat({u1, h1}, 1)));
  }
  torch::nn::Conv2d e1, e2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::ConvTranspose2d d1;
  torch::nn::BatchNorm2d bn3;
  torch::nn::Dropout drop;
  torch::nn::ConvTranspose2d d2;
};
TORCH_MODULE(Generator);

struct PatchDiscriminatorImpl : torch::nn::Module {
  PatchDiscriminatorImpl()
      : body(register_module(
            "body", torch::nn::Sequential(torch::nn::Conv2d(down(4, 32)), torch::nn::LeakyReLU(
                                                                             torch::nn::LeakyReLUOptions().negative_slope(0.2)),
                                          torch::nn::Conv2d(down(32, 64)), torch::nn::BatchNorm2d(64),
                                          torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
                                          torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 1, 3).padding(1))))) {}
  // sketch and tile stacked on channels [B, 4, 32, 32] -> patch logits [B, 1, 8, 8]
  torch::Tensor forward(const torch::Tensor &pair) { return body->forward(pair); }
  torch::nn::Sequential body;
};
TORCH_MODULE(PatchDiscriminator);

// CUDA autocast in bfloat16 for the scope; the destructor restores the state.
class Bf16Autocast {
public:
  Bf16Autocast() : was_on_(at::autocast::is_enabled()), dtype_(at::autocast::get_autocast_gpu_dtype()) {
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(true);
  }
  ~Bf16Autocast() {
    at::autocast::set_enabled(was_on_);
    at::autocast::set_autocast_gpu_dtype(dtype_);
  }

private:
  bool was_on_;
  at::ScalarType dtype_;
};

struct Pair {
  torch::Tensor sketch, tile;
};

// Smooth random colour fields; the sketch is the edge magnitude of their grey level.
std::vector<Pair> synth_pairs(int64_t batches, int64_t n, torch::Device device) {
  std::vector<Pair> out;
  for (int64_t b = 0; b < batches; ++b) {
    auto coarse = torch::rand({n, 3, 4, 4}, device) * 2 - 1;
    auto tile = F::interpolate(coarse, F::InterpolateFuncOptions()
                                           .size(std::vector<int64_t>{kSide, kSide})
                                           .mode(torch::kNearest));
    auto grey = tile.mean(1, /*keepdim=*/true);
    auto dx = (grey.narrow(3, 1, kSide - 1) - grey.narrow(3, 0, kSide - 1)).abs();
    auto dy = (grey.narrow(2, 1, kSide - 1) - grey.narrow(2, 0, kSide - 1)).abs();
    auto edges = F::pad(dx, F::PadFuncOptions({0, 1, 0, 0})) + F::pad(dy, F::PadFuncOptions({0, 0, 0, 1}));
    out.push_back({(edges > 0.05).to(torch::kFloat), tile});
  }
  return out;
}

void set_requires_grad(torch::nn::Module &module, bool on) {
  for (auto &p : module.parameters())
    p.set_requires_grad(on);
}

struct StepLosses {
  torch::Tensor d, g_adv, g_l1;
};

struct EpochLog {
  torch::Tensor d, g_adv, g_l1;
  int64_t steps = 0;
};

class Pix2PixTrainer {
public:
  Pix2PixTrainer(Generator g, PatchDiscriminator d, double lambda_l1, int64_t d_every)
      : g_(std::move(g)), d_(std::move(d)),
        g_opt_(g_->parameters(), torch::optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.999))),
        d_opt_(d_->parameters(), torch::optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.999))),
        lambda_l1_(lambda_l1), d_every_(d_every) {
    g_->train();
    d_->train();
  }

  StepLosses train_step(const Pair &p) {
    // BUG(torch-eval-mode-missing): the sanity validate() in main() switched
    // the generator to eval() and nothing switches it back: it trains with
    // Dropout off and frozen BatchNorm statistics.
    auto fake = g_(p.sketch);

    // OK(torch-eval-mode-missing): the discriminator is never switched to eval().
    auto real_logits = d_(torch::cat({p.sketch, p.tile}, 1));
    auto fake_logits = d_(torch::cat({p.sketch, fake.detach()}, 1));
    auto d_loss = F::binary_cross_entropy_with_logits(real_logits, torch::ones_like(real_logits)) +
                  F::binary_cross_entropy_with_logits(fake_logits, torch::zeros_like(fake_logits));
    // BUG(torch-grad-accumulation-unscaled): d_every_ steps' gradients of
    // this mean loss add up before each discriminator step, undivided.
    d_loss.backward();
    if (++steps_ % d_every_ == 0) {
      d_opt_.step();
      d_opt_.zero_grad();
    }

    set_requires_grad(*d_, false);
    g_opt_.zero_grad();
    torch::Tensor g_adv, g_l1;
    {
      Bf16Autocast amp;
      auto logits = d_(torch::cat({p.sketch, fake}, 1));
      g_adv = F::binary_cross_entropy_with_logits(logits, torch::ones_like(logits));
      g_l1 = F::l1_loss(fake, p.tile);
      // BUG(torch-autocast-region): backward() runs while the scope's
      // autocast is still on.
      (g_adv + lambda_l1_ * g_l1).backward();
    }
    // BUG(torch-missing-zero-grad): nothing resets any gradients between
    // this step and the next call's d_loss.backward() (the catalog's rule:
    // a reset of either network on that path would do).
    g_opt_.step();
    set_requires_grad(*d_, true);
    return {d_loss.detach(), g_adv.detach(), g_l1};
  }

  void fit(const std::vector<Pair> &data, const std::vector<Pair> &val, int epochs) {
    for (int epoch = 0; epoch < epochs; ++epoch) {
      auto zero = torch::zeros({}, data.front().tile.options());
      EpochLog log{zero.clone(), zero.clone(), zero.clone(), 0};
      for (const auto &p : data) {
        auto [d_loss, g_adv, g_l1] = train_step(p);
        // OK(torch-loss-accumulation-graph): detached in train_step().
        log.d += d_loss;
        log.g_adv += g_adv;
        // BUG(torch-loss-accumulation-graph): train_step() returns the L1
        // term still attached; the epoch log keeps every step's graph.
        log.g_l1 += g_l1;
        ++log.steps;
      }
      const double steps = static_cast<double>(log.steps);
      std::cout << "epoch " << epoch << " D " << log.d.item<double>() / steps << " G adv "
                << log.g_adv.item<double>() / steps << " L1 " << log.g_l1.item<double>() / steps << " val L1 "
                << validate(val) << '\n';
    }
  }

  double validate(const std::vector<Pair> &val) {
    g_->eval();
    double l1 = 0;
    for (const auto &p : val) {
      // BUG(torch-inference-without-no-grad): eval() only; autograd records
      // the generator's forward on every validation batch.
      auto tile = g_(p.sketch);
      l1 += F::l1_loss(tile, p.tile).item<double>();
    }
    return l1 / static_cast<double>(val.size());
  }

private:
  Generator g_;
  PatchDiscriminator d_;
  torch::optim::Adam g_opt_, d_opt_;
  double lambda_l1_;
  int64_t d_every_;
  int64_t steps_ = 0;
};

int main() {
  torch::manual_seed(145);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Generator g;
  PatchDiscriminator d;
  g->to(device);
  d->to(device);
  Pix2PixTrainer trainer(g, d, /*lambda_l1=*/100.0, /*d_every=*/2);

  auto train = synth_pairs(80, 32, device), val = synth_pairs(4, 64, device);
  std::cout << "sanity val L1 " << trainer.validate(val) << '\n';
  trainer.fit(train, val, 8);

  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): validate() left the generator in eval().
  auto preview = g->forward(val.front().sketch.narrow(0, 0, 4));
  std::cout << "preview range " << preview.min().item<double>() << " .. " << preview.max().item<double>() << '\n';
  return 0;
}
