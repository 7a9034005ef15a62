// A small GAN on 8x8 synthetic "stroke" images, trained in mixed precision
// with the LibTorch 1.13 autocast switches (float16 on CUDA, the default
// dtype). LibTorch has no GradScaler, so the critic's update scales its loss
// by hand with a static factor and unscales the gradients before the step.
// The generator carries BatchNorm; the critic has no mode-dependent layer.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kLatent = 24;
constexpr int64_t kPixels = 64;
constexpr double kLossScale = 1024.0;

struct GeneratorImpl : torch::nn::Module {
  GeneratorImpl()
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(kLatent, 128),
                                                         torch::nn::BatchNorm1d(128), torch::nn::ReLU(),
                                                         torch::nn::Linear(128, kPixels), torch::nn::Tanh()))) {}
  torch::Tensor forward(torch::Tensor z) { return net->forward(z); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Generator);

struct CriticImpl : torch::nn::Module {
  CriticImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kPixels, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::leaky_relu(fc1(x), 0.2)); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Critic);

// A horizontal stroke on one random row, in [-1, 1], with a little noise.
torch::Tensor stroke_batch(int64_t n, torch::Device device) {
  auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto rows = torch::randint(8, {n, 1}, ids);
  auto line = torch::arange(8, ids).unsqueeze(0).eq(rows).to(torch::kFloat);
  auto img = line.unsqueeze(2).expand({n, 8, 8}).reshape({n, kPixels});
  return img * 2 - 1 + 0.05 * torch::randn({n, kPixels}, device);
}

void unscale_grads(const std::vector<torch::Tensor> &params, double scale) {
  for (const auto &p : params)
    if (p.grad().defined())
      p.grad().div_(scale);
}

// Mean critic score of real minus generated images; the caller sets the modes.
double critic_margin(Critic &critic, Generator &gen, torch::Device device) {
  torch::NoGradGuard no_grad;
  double margin = 0;
  for (int i = 0; i < 4; ++i) {
    // OK(torch-eval-mode-missing): both callers call gen->eval() first.
    auto fake = gen->forward(torch::randn({128, kLatent}, device));
    // OK(torch-eval-mode-missing): the critic has no Dropout or BatchNorm.
    auto real_score = critic->forward(stroke_batch(128, device)).mean();
    margin += (real_score - critic->forward(fake).mean()).item<double>();
  }
  return margin / 4;
}

struct GanStats {
  torch::Tensor d_sum, g_sum;
};

void train_gan(Generator &gen, Critic &critic, torch::Device device, int epochs, int steps) {
  torch::optim::Adam g_opt(gen->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  torch::optim::Adam d_opt(critic->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    gen->train();
    GanStats stats{torch::zeros({}, device), torch::zeros({}, device)};
    for (int step = 0; step < steps; ++step) {
      auto real = stroke_batch(64, device);
      auto z = torch::randn({64, kLatent}, device);

      at::autocast::set_enabled(true);
      auto fake = gen->forward(z);
      auto d_loss = torch::softplus(-critic->forward(real)).mean() +
                    torch::softplus(critic->forward(fake.detach())).mean();
      at::autocast::set_enabled(false);
      at::autocast::clear_cache();
      d_opt.zero_grad();
      // OK(torch-autocast-region): after the region, and the loss is scaled by hand.
      (d_loss * kLossScale).backward();
      unscale_grads(critic->parameters(), kLossScale);
      // OK(torch-missing-zero-grad): d_opt.zero_grad() runs before the next critic backward.
      d_opt.step();

      at::autocast::set_enabled(true);
      auto g_loss = torch::softplus(-critic->forward(fake)).mean();
      at::autocast::set_enabled(false);
      at::autocast::clear_cache();
      g_opt.zero_grad();
      // BUG(torch-autocast-region): g_loss comes from a float16 region and
      // reaches backward() unscaled; the generator's small gradients
      // underflow to zero in half precision.
      g_loss.backward();
      // OK(torch-missing-zero-grad): each network is reset before its own backward().
      g_opt.step();

      stats.d_sum += d_loss.detach();
      stats.g_sum += g_loss.detach();
      if (step % 100 == 0)
        // OK(torch-host-sync-in-loop): every 100 steps.
        std::cout << "step " << step << " d " << d_loss.item<float>() << '\n';
    }
    gen->eval();
    std::cout << "epoch " << epoch << " d " << (stats.d_sum / steps).item<float>() << " g "
              << (stats.g_sum / steps).item<float>() << " margin " << critic_margin(critic, gen, device) << '\n';
  }
}

int main() {
  torch::manual_seed(3);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Generator gen;
  Critic critic;
  gen->to(device);
  critic->to(device);
  train_gan(gen, critic, device, 4, 300);

  gen->eval();
  std::cout << "final margin " << critic_margin(critic, gen, device) << '\n';
  torch::NoGradGuard no_grad;
  auto grid = gen->forward(torch::randn({16, kLatent}, device)).view({16, 1, 8, 8}).add(1).div(2);
  torch::save(grid.cpu(), "stroke_samples.pt");
}
