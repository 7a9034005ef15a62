// A DCGAN on synthetic 32x32 images: two networks, two optimizers, a
// training history struct, and a sample-grid writer for monitoring.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <vector>

struct GanConfig {
  int64_t noise_dim = 64;
  int64_t batch_size = 32;
  int64_t steps = 500;
  int64_t sample_every = 100;
  double lr = 2e-4;
};

struct History {
  std::vector<torch::Tensor> d_losses;
  std::vector<double> g_losses;
  int64_t steps = 0;
};

struct GeneratorImpl : torch::nn::Module {
  explicit GeneratorImpl(int64_t noise_dim)
      : net(register_module(
            "net",
            torch::nn::Sequential(
                torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(noise_dim, 128, 4).bias(false)),
                torch::nn::ReLU(),
                torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(128, 64, 4).stride(2).padding(1).bias(false)),
                torch::nn::ReLU(),
                torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(64, 3, 4).stride(4).bias(false)),
                torch::nn::Tanh()))) {}
  torch::Tensor forward(torch::Tensor z) { return net->forward(z); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Generator);

struct DiscriminatorImpl : torch::nn::Module {
  DiscriminatorImpl()
      : net(register_module(
            "net",
            torch::nn::Sequential(
                torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 64, 4).stride(2).padding(1)),
                torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
                torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 128, 4).stride(2).padding(1)),
                torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
                torch::nn::Flatten(),
                torch::nn::Linear(128 * 8 * 8, 1)))) {}
  torch::Tensor forward(torch::Tensor x) { return net->forward(x); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Discriminator);

torch::Device pick_device() {
  if (torch::cuda::is_available())
    return torch::Device(torch::kCUDA);
  return torch::Device(torch::kCPU);
}

torch::Tensor real_batch(int64_t n, torch::Device device) {
  return torch::rand({n, 3, 32, 32}, torch::TensorOptions().device(device)) * 2 - 1;
}

// Writes a monitoring grid; only the mean brightness is printed here.
void sample_grid(Generator &gen, const GanConfig &cfg, torch::Device device, int64_t rows) {
  double brightness = 0;
  for (int64_t r = 0; r < rows; ++r) {
    auto z = torch::randn({8, cfg.noise_dim, 1, 1}, device);
    // BUG(torch-inference-without-no-grad): a sampling loop with no backward
    // and no NoGradGuard; the caller holds none either.
    auto images = gen->forward(z);
    brightness += images.mean().item<double>();
  }
  std::cout << "grid brightness " << brightness / rows << '\n';
}

int main() {
  torch::manual_seed(1);
  GanConfig cfg;
  auto device = pick_device();
  Generator gen(cfg.noise_dim);
  Discriminator disc;
  gen->to(device);
  disc->to(device);
  torch::optim::Adam g_opt(gen->parameters(), torch::optim::AdamOptions(cfg.lr).betas({0.5, 0.999}));
  torch::optim::Adam d_opt(disc->parameters(), torch::optim::AdamOptions(cfg.lr).betas({0.5, 0.999}));

  History history;
  auto g_running = torch::zeros({}, device);
  for (int64_t step = 1; step <= cfg.steps; ++step) {
    auto real = real_batch(cfg.batch_size, device);
    auto z = torch::randn({cfg.batch_size, cfg.noise_dim, 1, 1}, device);
    auto fake = gen->forward(z);

    d_opt.zero_grad();
    auto ones = torch::ones({cfg.batch_size, 1}, device);
    auto zeros = torch::zeros({cfg.batch_size, 1}, device);
    auto d_loss = torch::binary_cross_entropy_with_logits(disc->forward(real), ones) +
                  torch::binary_cross_entropy_with_logits(disc->forward(fake.detach()), zeros);
    d_loss.backward();
    d_opt.step();

    g_opt.zero_grad();
    auto g_loss = torch::binary_cross_entropy_with_logits(disc->forward(fake), ones);
    g_loss.backward();
    g_opt.step();

    // BUG(torch-loss-accumulation-graph): d_loss still holds the
    // discriminator's graph; the history vector outlives every step.
    history.d_losses.push_back(d_loss);
    // OK(torch-loss-accumulation-graph): detached before it is kept.
    g_running += g_loss.detach();
    ++history.steps;

    if (step % cfg.sample_every == 0) {
      // OK(torch-host-sync-in-loop): every sample_every steps.
      history.g_losses.push_back((g_running / step).item<double>());
      std::cout << "step " << step << " g " << history.g_losses.back() << '\n';
    }
  }
  sample_grid(gen, cfg, device, 4);
  std::cout << "kept " << history.d_losses.size() << " discriminator losses\n";
  return 0;
}
