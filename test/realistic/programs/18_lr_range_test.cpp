// A learning-rate range test ("LR finder"): for each candidate schedule, the
// model is reset to its initial weights and trained with an exponentially
// growing learning rate until the smoothed loss diverges.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <vector>

struct RangeTestConfig {
  double start_lr = 1e-7;
  double end_lr = 10.0;
  int64_t steps = 200;
  int64_t batch = 128;
  double smoothing = 0.98;
};

struct RangeResult {
  std::vector<double> lrs;
  std::vector<double> losses;
  double best_lr = 0;
};

struct RegressorImpl : torch::nn::Module {
  RegressorImpl()
      : fc1(register_module("fc1", torch::nn::Linear(20, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Regressor);

void release_cached_memory() {
  // BUG(torch-empty-cache-in-loop): main() calls this after every trial of
  // its loop; the next trial must cudaMalloc everything again.
  c10::cuda::CUDACachingAllocator::emptyCache();
}

template <typename Model>
RangeResult range_test(Model &model, const RangeTestConfig &cfg, torch::Device device) {
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(cfg.start_lr).momentum(0.9));
  const double factor = std::pow(cfg.end_lr / cfg.start_lr, 1.0 / cfg.steps);
  RangeResult result;
  double lr = cfg.start_lr, smoothed = 0, best = std::numeric_limits<double>::infinity();
  for (int64_t step = 1; step <= cfg.steps; ++step) {
    for (auto &group : opt.param_groups())
      static_cast<torch::optim::SGDOptions &>(group.options()).lr(lr);
    auto x = torch::randn({cfg.batch, 20}, device);
    auto y = x.sum(1, /*keepdim=*/true);
    auto loss = torch::mse_loss(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    // BUG(torch-host-sync-in-loop): every step of the range test waits for
    // the GPU to read the loss.
    double value = loss.template item<double>();
    smoothed = cfg.smoothing * smoothed + (1 - cfg.smoothing) * value;
    double debiased = smoothed / (1 - std::pow(cfg.smoothing, step));
    result.lrs.push_back(lr);
    result.losses.push_back(debiased);
    if (debiased < best) {
      best = debiased;
      result.best_lr = lr;
    }
    if (debiased > 4 * best)
      break;
    lr *= factor;
  }
  return result;
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Regressor model;
  model->to(device);
  torch::serialize::OutputArchive initial;
  model->save(initial);
  initial.save_to("initial.pt");

  std::vector<RangeTestConfig> trials(3);
  trials[1].steps = 400;
  trials[2].batch = 512;
  for (const auto &cfg : trials) {
    torch::serialize::InputArchive restore;
    restore.load_from("initial.pt", device);
    model->load(restore);
    auto result = range_test(model, cfg, device);
    std::cout << "batch " << cfg.batch << ": suggested lr " << result.best_lr / 10 << " after "
              << result.lrs.size() << " steps\n";
    release_cached_memory();
  }
  return 0;
}
