// Synthesises GPS tracks of migrating storks (32 daily displacements in
// km/day, east and north) with a GAN, to augment the few hundred tagged birds
// a flyway study has. The generator carries BatchNorm, the discriminator
// Dropout; each has its own Adam optimizer. On the tracking lab's A100 the
// forward passes run under a bfloat16 autocast scope that is owned through a
// std::unique_ptr, created only when --bf16 is given and released with
// reset(). After training, the discriminator's realism score on held-out
// birds and a novelty check against an embedding of the tagged tracks decide
// whether the synthetic tracks are used.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kDays = 32, kLatent = 24, kFeat = kDays * 2;

// bfloat16 CUDA autocast while alive; restores the previous state and dtype.
class Bf16Autocast {
 public:
  Bf16Autocast() {
#if TORCH_VERSION_MAJOR >= 2
    was_on_ = at::autocast::is_autocast_enabled(at::kCUDA);
    old_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    was_on_ = at::autocast::is_enabled();
    old_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(true);
#endif
  }
  ~Bf16Autocast() {
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_enabled(at::kCUDA, was_on_);
    at::autocast::set_autocast_dtype(at::kCUDA, old_dtype_);
#else
    at::autocast::set_enabled(was_on_);
    at::autocast::set_autocast_gpu_dtype(old_dtype_);
#endif
  }
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  bool was_on_ = false;
  at::ScalarType old_dtype_ = at::kHalf;
};

struct TrackGeneratorImpl : torch::nn::Module {
  TrackGeneratorImpl()
      : body(register_module("body", torch::nn::Sequential(torch::nn::Linear(kLatent, 128), torch::nn::BatchNorm1d(128),
                                                           torch::nn::ReLU(), torch::nn::Linear(128, kFeat)))) {}
  torch::Tensor forward(const torch::Tensor& z) { return body->forward(z); }
  torch::nn::Sequential body;
};
TORCH_MODULE(TrackGenerator);

struct TrackCriticImpl : torch::nn::Module {
  TrackCriticImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kFeat, 128))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        fc2(register_module("fc2", torch::nn::Linear(128, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(drop(F::leaky_relu(fc1(x), F::LeakyReLUFuncOptions().negative_slope(0.2)))); }
  torch::nn::Linear fc1;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(TrackCritic);

// Embeds a track for the nearest-neighbour novelty check; no mode-dependent layers.
struct TrackEncoderImpl : torch::nn::Module {
  TrackEncoderImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kFeat, 64))), fc2(register_module("fc2", torch::nn::Linear(64, 16))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(TrackEncoder);

// Daily displacements: a flyway heading that drifts, stopovers of near zero.
torch::Tensor tagged_tracks(int64_t n, torch::Device device) {
  auto heading = 3.6 + 0.3 * torch::randn({n, 1}, device) + 0.05 * torch::randn({n, kDays}, device).cumsum(1);
  auto speed = 180.0 * (torch::rand({n, kDays}, device) > 0.3).to(torch::kFloat) * torch::rand({n, kDays}, device);
  auto east = speed * torch::cos(heading), north = speed * torch::sin(heading);
  return torch::stack({east, north}, 2).reshape({n, kFeat}) / 200.0;
}

struct GanConfig {
  int64_t steps = 3000;
  int64_t batch = 64;
  bool bf16 = false;
};

void train_tracks(TrackGenerator& gen, TrackCritic& critic, const GanConfig& cfg, torch::Device device) {
  gen->train();
  critic->train();
  torch::optim::Adam g_opt(gen->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  torch::optim::Adam d_opt(critic->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  std::function<void()> clear_critic = [&d_opt] { d_opt.zero_grad(); };
  std::vector<float> d_history;
  auto ones = torch::ones({cfg.batch, 1}, device), zeros = torch::zeros({cfg.batch, 1}, device);
  for (int64_t step = 0; step < cfg.steps; ++step) {
    auto real = tagged_tracks(cfg.batch, device);
    std::unique_ptr<Bf16Autocast> amp;
    if (cfg.bf16)
      amp = std::make_unique<Bf16Autocast>();
    auto fake = gen->forward(torch::randn({cfg.batch, kLatent}, device));
    clear_critic();
    auto d_loss = F::binary_cross_entropy_with_logits(critic->forward(real), ones) +
                  F::binary_cross_entropy_with_logits(critic->forward(fake.detach()), zeros);
    amp.reset();
    // OK(torch-autocast-region): the scope was released just above.
    d_loss.backward();
    // BUG(torch-missing-zero-grad): nothing resets before the generator's
    // backward below; the generator's gradients pile up over every step.
    d_opt.step();

    if (cfg.bf16)
      amp = std::make_unique<Bf16Autocast>();
    auto g_loss = F::binary_cross_entropy_with_logits(critic->forward(fake), ones);
    // BUG(torch-autocast-region): with --bf16 the second scope is still held
    // here, so the generator's backward runs inside autocast.
    g_loss.backward();
    g_opt.step();
    amp.reset();

    // BUG(torch-host-sync-in-loop): every step waits for the GPU to copy the loss back.
    d_history.push_back(d_loss.item<float>());
    if (step % 500 == 0)
      // OK(torch-host-sync-in-loop): logged every 500 steps only.
      std::cout << "step " << step << " g_loss " << g_loss.item<float>() << '\n';
  }
}

// Short second pass on the few birds from the eastern flyway; both networks reset.
void refine_eastern(TrackGenerator& gen, TrackCritic& critic, const torch::Tensor& eastern, torch::Device device) {
  torch::optim::Adam g_opt(gen->parameters(), torch::optim::AdamOptions(5e-5).betas({0.5, 0.999}));
  torch::optim::Adam d_opt(critic->parameters(), torch::optim::AdamOptions(5e-5).betas({0.5, 0.999}));
  const int64_t n = eastern.size(0);
  for (int step = 0; step < 200; ++step) {
    auto fake = gen->forward(torch::randn({n, kLatent}, device));
    d_opt.zero_grad();
    auto d_loss = F::binary_cross_entropy_with_logits(critic->forward(eastern), torch::ones({n, 1}, device)) +
                  F::binary_cross_entropy_with_logits(critic->forward(fake.detach()), torch::zeros({n, 1}, device));
    d_loss.backward();
    // OK(torch-missing-zero-grad): the generator's gradients are reset before its backward.
    d_opt.step();
    g_opt.zero_grad();
    auto g_loss = F::binary_cross_entropy_with_logits(critic->forward(fake), torch::ones({n, 1}, device));
    g_loss.backward();
    g_opt.step();
  }
}

// Mean probability the critic gives real held-out birds.
double realism_score(TrackCritic& critic, const torch::Tensor& tracks) {
  torch::NoGradGuard no_grad;
  // BUG(torch-eval-mode-missing): main() scores right after training, with
  // the critic's Dropout still active.
  return torch::sigmoid(critic->forward(tracks)).mean().item<double>();
}

// Median distance of synthetic tracks to their nearest tagged track, in embedding space.
double novelty(TrackEncoder& enc, const torch::Tensor& synthetic, const torch::Tensor& tagged) {
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): the encoder has only Linear and tanh, so
  // its mode changes nothing.
  auto a = enc->forward(synthetic);
  auto b = enc->forward(tagged);
  return std::get<0>(torch::cdist(a, b).min(1)).median().item<double>();
}

int main(int argc, char** argv) {
  torch::manual_seed(211);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  GanConfig cfg;
  cfg.bf16 = device.is_cuda() && argc > 1 && std::string(argv[1]) == "--bf16";

  TrackGenerator gen;
  TrackCritic critic;
  TrackEncoder encoder;
  gen->to(device);
  critic->to(device);
  encoder->to(device);
  train_tracks(gen, critic, cfg, device);
  refine_eastern(gen, critic, tagged_tracks(48, device), device);

  auto held_out = tagged_tracks(256, device);
  std::cout << "realism " << realism_score(critic, held_out) << '\n';

  gen->eval();
  torch::Tensor synthetic;
  {
    torch::NoGradGuard no_grad;
    // OK(torch-eval-mode-missing): gen->eval() above.
    synthetic = gen->forward(torch::randn({512, kLatent}, device));
  }
  std::cout << "novelty " << novelty(encoder, synthetic, held_out) << '\n';
}
