// A DCGAN on 16x16 synthetic blobs: a generator with BatchNorm, a
// discriminator with Dropout, two Adam optimizers. Every few epochs it renders
// a fixed-noise sample grid and scores the discriminator on held-out real
// images; a small linear probe (no mode-dependent layer) tracks a feature.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kNoise = 32;

struct GeneratorImpl : torch::nn::Module {
  GeneratorImpl()
      : net(register_module(
            "net", torch::nn::Sequential(torch::nn::Linear(kNoise, 128), torch::nn::BatchNorm1d(128),
                                         torch::nn::ReLU(), torch::nn::Linear(128, 256),
                                         torch::nn::Tanh()))) {}
  torch::Tensor forward(torch::Tensor z) { return net->forward(z).view({-1, 1, 16, 16}); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Generator);

struct DiscriminatorImpl : torch::nn::Module {
  DiscriminatorImpl()
      : fc1(register_module("fc1", torch::nn::Linear(256, 128))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        fc2(register_module("fc2", torch::nn::Linear(128, 1))) {}
  torch::Tensor forward(torch::Tensor x) {
    return fc2(drop(torch::leaky_relu(fc1(x.flatten(1)), 0.2)));
  }
  torch::nn::Linear fc1;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Discriminator);

struct ProbeImpl : torch::nn::Module {
  ProbeImpl() : fc(register_module("fc", torch::nn::Linear(256, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x.flatten(1)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Probe);

torch::Tensor real_batch(int64_t n, torch::Device device) {
  auto centres = torch::rand({n, 1, 1, 1}, device) * 2 - 1;
  return (torch::randn({n, 1, 16, 16}, device) * 0.1 + centres).clamp(-1, 1);
}

// Renders the fixed-noise grid; the caller decides the generator's mode.
torch::Tensor render_grid(Generator &gen, const torch::Tensor &fixed_noise) {
  torch::NoGradGuard no_grad;
  // BUG(torch-eval-mode-missing): train_gan() renders between epochs without
  // gen->eval(): BatchNorm normalises the 16 grid samples with their own
  // statistics and overwrites the running ones.
  return gen->forward(fixed_noise).add(1).div(2);
}

// Scores held-out real images; switches the discriminator itself.
double real_score(Discriminator &disc, torch::Device device) {
  disc->eval();
  torch::NoGradGuard no_grad;
  double total = 0;
  for (int i = 0; i < 4; ++i) {
    // OK(torch-eval-mode-missing): eval() above.
    total += torch::sigmoid(disc->forward(real_batch(64, device))).mean().item<double>();
  }
  disc->train();
  return total / 4;
}

void train_gan(Generator &gen, Discriminator &disc, torch::Device device, int epochs) {
  torch::optim::Adam gen_opt(gen->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  torch::optim::Adam disc_opt(disc->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  auto fixed_noise = torch::randn({16, kNoise}, device);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (int step = 0; step < 50; ++step) {
      auto real = real_batch(64, device);
      auto fake = gen->forward(torch::randn({64, kNoise}, device));
      // OK(torch-eval-mode-missing): the discriminator trains here, in train mode.
      auto d_real = disc->forward(real);
      auto d_fake = disc->forward(fake.detach());
      auto d_loss = torch::softplus(-d_real).mean() + torch::softplus(d_fake).mean();
      disc_opt.zero_grad();
      d_loss.backward();
      disc_opt.step();

      auto g_loss = torch::softplus(-disc->forward(fake)).mean();
      gen_opt.zero_grad();
      g_loss.backward();
      gen_opt.step();
    }
    auto grid = render_grid(gen, fixed_noise);
    std::cout << "epoch " << epoch << " grid mean " << grid.mean().item<double>()
              << " real score " << real_score(disc, device) << '\n';
  }
}

double probe_feature(Probe &probe, torch::Device device) {
  torch::NoGradGuard no_grad;
  double sum = 0;
  for (int i = 0; i < 8; ++i) {
    // OK(torch-eval-mode-missing): a linear probe has no mode-dependent layer.
    sum += probe->forward(real_batch(32, device)).mean().item<double>();
  }
  return sum / 8;
}

int main() {
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Generator gen;
  Discriminator disc;
  Probe probe;
  gen->to(device);
  disc->to(device);
  probe->to(device);
  train_gan(gen, disc, device, 5);
  gen->eval();
  auto final_grid = render_grid(gen, torch::randn({16, kNoise}, device));
  std::cout << "final " << final_grid.sizes() << " probe " << probe_feature(probe, device) << '\n';
}
