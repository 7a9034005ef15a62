// Denoising diffusion on 32x32 single-channel patches, trained with the
// epsilon objective and sampled with deterministic DDIM. The cumulative
// noise schedule is computed once in a function-local static. A small
// hook struct with std::function members lets the trainer run housekeeping
// at the end of each step.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <vector>

constexpr int64_t kSteps = 1000;

const torch::Tensor &alphas_cumprod() {
  static const torch::Tensor ac = torch::cumprod(1 - torch::linspace(1e-4, 0.02, kSteps), 0);
  return ac;
}

struct EpsNetImpl : torch::nn::Module {
  EpsNetImpl()
      : c1(register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 64, 3).padding(1)))),
        c2(register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 64, 3).padding(1)))),
        c3(register_module("c3", torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 1, 3).padding(1)))) {}
  // The timestep enters as a constant second channel.
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &t) {
    auto tc = (t.to(torch::kFloat) / kSteps).view({-1, 1, 1, 1}).expand_as(x);
    auto h = torch::silu(c1->forward(torch::cat({x, tc}, 1)));
    return c3->forward(torch::silu(c2->forward(h)));
  }
  torch::nn::Conv2d c1, c2, c3;
};
TORCH_MODULE(EpsNet);

struct StepHooks {
  std::function<void(int64_t)> on_step_end = [](int64_t) {};
  std::function<void()> on_epoch_end = [] {};
};

torch::Tensor patches(int64_t n, torch::Device d) {
  auto base = torch::linspace(-1, 1, 32, torch::TensorOptions().device(d));
  auto grid = torch::outer(base, base).view({1, 1, 32, 32});
  return torch::sin(grid * torch::randint(1, 6, {n, 1, 1, 1}, torch::TensorOptions().device(d)));
}

int main() {
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  EpsNet net;
  net->to(device);
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(2e-4));

  StepHooks hooks;
  hooks.on_step_end = [&](int64_t step) {
    if (device.is_cuda() && step % 10 == 0)
      // BUG(torch-empty-cache-in-loop): the hook runs on every training step;
      // every tenth step still frees and re-allocates the whole cache.
      c10::cuda::CUDACachingAllocator::emptyCache();
  };
  const bool profile = std::getenv("DDIM_PROFILE") != nullptr;

  for (int epoch = 0; epoch < 30; ++epoch) {
    for (int64_t step = 0; step < 500; ++step) {
      auto x0 = patches(64, device);
      auto t = torch::randint(0, kSteps, {64}, torch::kLong);
      auto a = alphas_cumprod().index_select(0, t).view({-1, 1, 1, 1});
      auto eps = torch::randn_like(x0);
      // BUG(torch-device-mismatch): the schedule is a host tensor kept in a
      // function-local static; the patches are on the device.
      auto xt = a.sqrt() * x0 + (1 - a).sqrt() * eps;
      opt.zero_grad();
      auto loss = torch::mse_loss(net->forward(xt, t.to(device)), eps);
      loss.backward();
      opt.step();
      hooks.on_step_end(step);
      if (profile)
        // OK(torch-host-sync-in-loop): only when profiling.
        torch::cuda::synchronize();
      // BUG(torch-host-sync-in-loop): a blocking copy to the host on every
      // step, for a loss curve that is written once per epoch.
      auto l = loss.detach().cpu();
      if (step == 499)
        std::cout << "epoch " << epoch << " last loss " << l.item<float>() << "\n";
    }
    hooks.on_epoch_end();
  }

  // DDIM sampling, 50 steps, eta = 0.
  net->eval();
  const int64_t stride = kSteps / 50;
  auto x = torch::randn({16, 1, 32, 32}, torch::TensorOptions().device(device));
  auto ac = alphas_cumprod().to(device);
  int64_t i = kSteps - 1;
  do {
    auto t = torch::full({16}, i, torch::TensorOptions().dtype(torch::kLong).device(device));
    // BUG(torch-inference-without-no-grad): sampling loop with autograd on;
    // each step's graph is kept through x.
    auto eps = net->forward(x, t);
    auto a_t = ac[i];
    auto a_prev = i >= stride ? ac[i - stride] : torch::ones({}, ac.options());
    auto x0_hat = (x - (1 - a_t).sqrt() * eps) / a_t.sqrt();
    // OK(torch-device-mismatch): the schedule was moved before sampling.
    x = a_prev.sqrt() * x0_hat + (1 - a_prev).sqrt() * eps;
    i -= stride;
  } while (i >= 0);
  torch::save(x.detach().cpu(), "ddim_samples.pt");
  return 0;
}
