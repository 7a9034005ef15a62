// Learns 12x12 "glyphs" (a ring or a cross at a random offset) with a GAN:
// the generator carries BatchNorm, the critic Dropout, and each network has
// its own Adam optimizer. The update that follows each backward() (gradient
// clipping, the step, bookkeeping) is a std::function built once before the
// loop, so the loop body reads as forward / backward / update. Previews and
// critic scores come from small templates over the network type.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <string>

constexpr int64_t kLatent = 16;
constexpr int64_t kSide = 12;
constexpr int64_t kPixels = kSide * kSide;

struct GeneratorImpl : torch::nn::Module {
  GeneratorImpl()
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(kLatent, 128), torch::nn::BatchNorm1d(128),
                                                         torch::nn::ReLU(), torch::nn::Linear(128, kPixels),
                                                         torch::nn::Tanh()))) {}
  torch::Tensor forward(torch::Tensor z) { return net->forward(z); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Generator);

struct CriticImpl : torch::nn::Module {
  CriticImpl()
      : net(register_module("net", torch::nn::Sequential(
                                       torch::nn::Linear(kPixels, 128),
                                       torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
                                       torch::nn::Dropout(0.2), torch::nn::Linear(128, 1)))) {}
  torch::Tensor forward(torch::Tensor x) { return net->forward(x); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Critic);

// Half rings, half crosses, each shifted by up to two pixels; values in [-1, 1].
torch::Tensor real_glyphs(int64_t n, torch::Device device) {
  auto opts = torch::TensorOptions().device(device);
  auto coords = torch::arange(kSide, opts) - (kSide - 1) / 2.0;
  auto shift = torch::randint(-2, 3, {n, 2, 1, 1}, opts);
  auto ys = coords.view({1, kSide, 1}) - shift.select(1, 0);
  auto xs = coords.view({1, 1, kSide}) - shift.select(1, 1);
  auto radius = (xs * xs + ys * ys).sqrt();
  auto ring = ((radius - 3.5).abs() < 0.8).to(torch::kFloat);
  auto cross = ((xs.abs() < 0.8) | (ys.abs() < 0.8)).to(torch::kFloat) * (radius < 4.5).to(torch::kFloat);
  auto is_ring = (torch::rand({n, 1, 1}, opts) < 0.5).to(torch::kFloat);
  auto img = is_ring * ring + (1 - is_ring) * cross;
  return (img * 2 - 1).reshape({n, kPixels});
}

void set_eval(torch::nn::Module &module) { module.eval(); }
void set_train(torch::nn::Module &module) { module.train(); }

// Renders a preview grid in [0, 1]; the caller decides the generator's mode.
template <typename G> torch::Tensor render_preview(G &gen, const torch::Tensor &noise) {
  torch::NoGradGuard no_grad;
  // BUG(torch-eval-mode-missing): train_gan() renders its mid-training
  // previews with the generator still in training mode: BatchNorm normalises
  // the 16 preview samples by their own statistics and overwrites the
  // running ones that the final samples use.
  return gen->forward(noise).view({-1, 1, kSide, kSide}).add(1).div(2);
}

// Mean probability the critic gives held-out real glyphs.
template <typename D> double real_score(D &critic, torch::Device device) {
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): the only caller switches the critic to
  // eval() through set_eval() first.
  auto probs = torch::sigmoid(critic->forward(real_glyphs(512, device)));
  return probs.mean().template item<double>();
}

void train_gan(Generator &gen, Critic &critic, torch::Device device, int epochs, int steps) {
  torch::optim::Adam g_opt(gen->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  torch::optim::Adam d_opt(critic->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  int64_t critic_updates = 0, generator_updates = 0;

  std::function<void()> critic_update = [&] {
    torch::nn::utils::clip_grad_norm_(critic->parameters(), 1.0);
    // OK(torch-missing-zero-grad): the critic's gradients are cleared right
    // after its step, before the generator's backward().
    d_opt.step();
    d_opt.zero_grad();
    ++critic_updates;
  };
  std::function<void()> generator_update = [&] {
    // BUG(torch-missing-zero-grad): nothing resets any gradient between this
    // step and the next iteration's critic backward(): the generator's
    // gradients pile up over all steps, and the critic's next update also
    // carries what the generator loss put into the critic's .grad().
    g_opt.step();
    ++generator_updates;
  };

  auto fixed_noise = torch::randn({16, kLatent}, device);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    set_train(*gen);
    set_train(*critic);
    auto d_running = torch::zeros({}, device);
    for (int step = 0; step < steps; ++step) {
      auto real = real_glyphs(64, device);
      // OK(torch-eval-mode-missing): trains, in training mode.
      auto fake = gen->forward(torch::randn({64, kLatent}, device));
      auto d_loss = torch::softplus(-critic->forward(real)).mean() +
                    torch::softplus(critic->forward(fake.detach())).mean();
      d_loss.backward();
      critic_update();

      auto g_loss = torch::softplus(-critic->forward(fake)).mean();
      g_loss.backward();
      generator_update();
      d_running += d_loss.detach();
    }
    if (epoch % 5 == 4) {
      set_eval(*critic);
      const double score = real_score(critic, device);
      set_train(*critic);
      auto preview = render_preview(gen, fixed_noise);
      torch::save(preview.cpu(), "preview_" + std::to_string(epoch) + ".pt");
      std::cout << "epoch " << epoch << " d loss " << (d_running / steps).item<double>() << " real score "
                << score << " updates " << critic_updates << "/" << generator_updates << '\n';
    }
  }
}

int main() {
  torch::manual_seed(12);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Generator gen;
  Critic critic;
  gen->to(device);
  critic->to(device);
  train_gan(gen, critic, device, 20, 200);

  set_eval(*gen);
  auto samples = render_preview(gen, torch::randn({64, kLatent}, device));
  torch::save(samples.cpu(), "glyph_samples.pt");
  std::cout << "saved " << samples.size(0) << " samples\n";
}
