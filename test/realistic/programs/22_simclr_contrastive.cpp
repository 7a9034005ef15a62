// SimCLR-style self-supervised pre-training: two augmented views per image
// from a std::function pipeline, an NT-Xent loss, and a k-NN monitor against
// a memory bank of features.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <vector>

using Augment = std::function<torch::Tensor(torch::Tensor)>;

std::vector<Augment> make_augmentations() {
  return {[](torch::Tensor x) { return x.flip({3}); },
          [](torch::Tensor x) { return (x + 0.1 * torch::randn_like(x)).clamp(0, 1); },
          [](torch::Tensor x) { return x * (0.8 + 0.4 * torch::rand({x.size(0), 1, 1, 1})); }};
}

torch::Tensor augment(const std::vector<Augment> &augs, torch::Tensor x) {
  for (const auto &a : augs)
    x = a(x);
  return x;
}

struct SimClrImpl : torch::nn::Module {
  SimClrImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).stride(2).padding(1)))),
        proj(register_module("proj", torch::nn::Linear(32, 64))) {}
  torch::Tensor forward(torch::Tensor x) {
    auto h = torch::relu(conv(x)).mean({2, 3});
    return torch::nn::functional::normalize(proj(h), torch::nn::functional::NormalizeFuncOptions().dim(1));
  }
  torch::nn::Conv2d conv;
  torch::nn::Linear proj;
};
TORCH_MODULE(SimClr);

torch::Tensor nt_xent(const torch::Tensor &z1, const torch::Tensor &z2, double temperature) {
  auto z = torch::cat({z1, z2});
  const int64_t n = z1.size(0);
  auto sim = torch::mm(z, z.t()) / temperature;
  auto self = torch::eye(2 * n, z.options());
  auto logits = sim - 1e9 * self;
  auto targets = torch::cat({torch::arange(n, 2 * n), torch::arange(0, n)}).to(z.device());
  return torch::nn::functional::cross_entropy(logits, targets);
}

class MemoryBank {
 public:
  MemoryBank(int64_t size, int64_t dim)
      : bank_(torch::nn::functional::normalize(torch::randn({size, dim}),
                                               torch::nn::functional::NormalizeFuncOptions().dim(1))) {}
  const torch::Tensor &features() const { return bank_; }

 private:
  torch::Tensor bank_;
};

double knn_monitor(SimClr &model, const torch::Tensor &probe, const torch::Tensor &bank) {
  torch::NoGradGuard no_grad;
  auto f = model->forward(probe);
  auto sim = torch::matmul(f, bank.t());
  return std::get<0>(sim.max(1)).mean().item<double>();
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  SimClr model;
  model->to(device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(3e-4));
  auto augs = make_augmentations();
  MemoryBank bank(4096, 64);

  auto epoch_loss = torch::zeros({}, device);
  int64_t steps = 0;
  auto log_loss = [&epoch_loss, &steps](const torch::Tensor &loss) {
    // BUG(torch-loss-accumulation-graph): log_loss() is called with the
    // training loss on every step; epoch_loss keeps all their graphs.
    epoch_loss += loss;
    ++steps;
  };

  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    for (int64_t step = 0; step < 100; ++step) {
      auto images = torch::rand({64, 3, 32, 32});
      auto v1 = augment(augs, images).to(device);
      auto v2 = augment(augs, images).to(device);
      auto loss = nt_xent(model->forward(v1), model->forward(v2), 0.5);
      opt.zero_grad();
      loss.backward();
      opt.step();
      log_loss(loss);
      if (step % 50 == 0)
        // OK(torch-host-sync-in-loop): every 50 steps.
        std::cout << "epoch " << epoch << " step " << step << " loss " << loss.item<double>() << '\n';
    }
    // BUG(torch-device-mismatch): knn_monitor() multiplies the features of
    // 'model' (on 'device') with the bank, which its getter returns on the host.
    double knn = knn_monitor(model, torch::rand({32, 3, 32, 32}).to(device), bank.features());
    std::cout << "epoch " << epoch << " mean loss " << (epoch_loss / steps).item<double>() << " knn " << knn << '\n';
  }
  return 0;
}
