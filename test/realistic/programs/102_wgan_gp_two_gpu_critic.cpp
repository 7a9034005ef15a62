// WGAN-GP on 64-dimensional feature vectors, split over two GPUs: the
// generator on the first, the critic on the second. The gradient penalty
// uses torch::autograd::grad on interpolates. The critic runs five updates
// per generator update. Running Wasserstein estimates are kept in a tuple.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <tuple>
#include <vector>

constexpr int64_t kZ = 32, kX = 64, kBatch = 256, kCritic = 5;

torch::nn::Sequential make_generator() {
  return torch::nn::Sequential(torch::nn::Linear(kZ, 256), torch::nn::ReLU(), torch::nn::Linear(256, 256),
                               torch::nn::ReLU(), torch::nn::Linear(256, kX));
}

torch::nn::Sequential make_critic() {
  return torch::nn::Sequential(torch::nn::Linear(kX, 256), torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
                               torch::nn::Linear(256, 256), torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
                               torch::nn::Linear(256, 1));
}

// Real data: a mixture of eight Gaussians on a ring in the first two
// coordinates, noise elsewhere.
torch::Tensor real_batch(torch::Device d) {
  auto k = torch::randint(0, 8, {kBatch}, torch::TensorOptions().device(d)).to(torch::kFloat) * (M_PI / 4);
  auto x = 0.05 * torch::randn({kBatch, kX}, torch::TensorOptions().device(d));
  x.select(1, 0).add_(2.0 * torch::cos(k));
  x.select(1, 1).add_(2.0 * torch::sin(k));
  return x;
}

int main() {
  if (torch::cuda::device_count() < 2) {
    std::cerr << "needs two GPUs\n";
    return 1;
  }
  // OK(torch-device-index-unchecked): two devices were proven above.
  const torch::Device gen_dev(torch::kCUDA, 0), critic_dev(torch::kCUDA, 1);
  auto gen = make_generator();
  auto critic = make_critic();
  gen->to(gen_dev);
  critic->to(critic_dev);
  torch::optim::Adam g_opt(gen->parameters(), torch::optim::AdamOptions(1e-4).betas({0.5, 0.9}));
  torch::optim::Adam d_opt(critic->parameters(), torch::optim::AdamOptions(1e-4).betas({0.5, 0.9}));

  std::tuple<torch::Tensor, torch::Tensor> running{torch::zeros({}, critic_dev), torch::zeros({}, critic_dev)};
  std::vector<float> w_log;
  const double lambda = 10.0;
  for (int64_t it = 0; it < 20000; ++it) {
    for (int c = 0; c < kCritic; ++c) {
      auto real = real_batch(critic_dev);
      torch::Tensor fake;
      {
        torch::NoGradGuard no_grad;
        fake = gen->forward(torch::randn({kBatch, kZ}, torch::TensorOptions().device(gen_dev)));
      }
      auto alpha = torch::rand({kBatch, 1}, real.options());
      // BUG(torch-device-mismatch): the fake batch is still on the
      // generator's GPU; the real batch and alpha are on the critic's.
      auto interp = (alpha * real + (1 - alpha) * fake).requires_grad_(true);
      auto d_interp = critic->forward(interp);
      // OK(torch-host-sync-in-loop): autograd::grad is not a sync.
      auto grads = torch::autograd::grad({d_interp}, {interp}, {torch::ones_like(d_interp)}, true, true)[0];
      auto gp = (grads.norm(2, 1) - 1).pow(2).mean();
      auto w = critic->forward(real).mean() - critic->forward(fake.to(critic_dev)).mean();
      auto d_loss = -w + lambda * gp;
      d_opt.zero_grad();
      d_loss.backward();
      d_opt.step();
      // BUG(torch-host-sync-in-loop): the Wasserstein estimate is read back
      // on every critic update.
      w_log.push_back(w.item<float>());
      // BUG(torch-loss-accumulation-graph): the critic's Wasserstein
      // estimate is summed with its graph into the tuple.
      std::get<0>(running) += w;
    }
    auto z = torch::randn({kBatch, kZ}, torch::TensorOptions().device(gen_dev));
    auto g_loss = -critic->forward(gen->forward(z).to(critic_dev)).mean();
    g_opt.zero_grad();
    g_loss.backward();
    g_opt.step();
    // OK(torch-loss-accumulation-graph): detached.
    std::get<1>(running) += g_loss.detach();
    if (it % 500 == 0) {
      std::cout << "it " << it << " W " << (std::get<0>(running) / (500 * kCritic)).item<float>() << " G "
                << (std::get<1>(running) / 500).item<float>() << " last W " << w_log.back() << "\n";
      std::get<0>(running).zero_();
      std::get<1>(running).zero_();
    }
  }

  torch::NoGradGuard no_grad;
  // BUG(torch-device-index-unchecked): a third GPU for the evaluation copy;
  // the check above only proves two.
  const torch::Device eval_dev(torch::kCUDA, 2);
  auto samples = gen->forward(torch::randn({4096, kZ}, torch::TensorOptions().device(gen_dev))).to(eval_dev);
  auto host = samples.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): the comparison reads the host copy
  // before the transfer is known to be done.
  auto outliers = (host > 3.0).logical_or(host < -3.0).any(1);
  std::cout << "outlier samples " << outliers.sum().item<int64_t>() << " of 4096\n";
  return 0;
}
