// A small hyper-parameter sweep: each trial trains an MLP and reports its
// validation loss; the best configuration is re-trained at full size, and a
// throughput probe runs the largest batch once.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <limits>
#include <vector>

struct Trial {
  double lr = 1e-3;
  int64_t width = 256;
  int64_t batch = 128;
  int64_t steps = 200;
};

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int64_t width)
      : fc1(register_module("fc1", torch::nn::Linear(64, width))),
        fc2(register_module("fc2", torch::nn::Linear(width, width))),
        out(register_module("out", torch::nn::Linear(width, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return out(torch::relu(fc2(torch::relu(fc1(x))))); }
  torch::nn::Linear fc1, fc2, out;
};
TORCH_MODULE(Mlp);

double run_trial(const Trial &t, torch::Device device) {
  Mlp model(t.width);
  model->to(device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(t.lr));
  for (int64_t step = 0; step < t.steps; ++step) {
    auto x = torch::randn({t.batch, 64}, device);
    auto loss = torch::mse_loss(model->forward(x), x.sum(1, true).sin());
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  // OK(torch-inference-without-no-grad): validation under a guard.
  torch::NoGradGuard no_grad;
  auto total = torch::zeros({}, device);
  for (int64_t i = 0; i < 10; ++i) {
    auto x = torch::randn({512, 64}, device);
    total += torch::mse_loss(model->forward(x), x.sum(1, true).sin());
  }
  return (total / 10).item<double>();
}

// Peak throughput probe: one forward and backward at the largest batch.
double probe_throughput(int64_t batch, torch::Device device) {
  Mlp model(4096);
  model->to(device);
  auto step = [&]() {
    auto x = torch::randn({batch, 64}, device);
    model->forward(x).sum().backward();
    return static_cast<double>(batch);
  };
  double samples = 0;
  try {
    samples = step();
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): step() is retried at the same batch
    // size; the allocator emptied its cache before it raised.
    c10::cuda::CUDACachingAllocator::emptyCache();
    samples = step();
  }
  return samples;
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  std::vector<Trial> trials;
  for (double lr : {1e-2, 3e-3, 1e-3})
    for (int64_t width : {128, 512})
      trials.push_back({lr, width, 128, 200});

  Trial best;
  double best_loss = std::numeric_limits<double>::infinity();
  for (const auto &t : trials) {
    double loss = run_trial(t, device);
    std::cout << "lr " << t.lr << " width " << t.width << ": " << loss << '\n';
    if (loss < best_loss) {
      best_loss = loss;
      best = t;
    }
  }

  best.batch = 8192;
  best.steps = 2000;
  double final_loss = 0;
  try {
    final_loss = run_trial(best, device);
  } catch (const c10::OutOfMemoryError &) {
    // OK(torch-empty-cache-oom-retry): the retry below uses a quarter of the batch.
    c10::cuda::CUDACachingAllocator::emptyCache();
    best.batch /= 4;
    final_loss = run_trial(best, device);
  }
  std::cout << "final " << final_loss << ", probe " << probe_throughput(65536, device) << " samples\n";
  return 0;
}
