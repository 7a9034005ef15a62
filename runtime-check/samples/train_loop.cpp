// Overhead benchmark for the recorder (not a bug sample): a 200-step MLP
// training loop on CUDA with the usual per-step work (forward, loss,
// backward, optimizer step, a conditional log). It prints the loop's own wall
// time, so gpu-selftest.sh can compare runs with and without the recorder
// without counting process start-up.
//
//   train_loop [steps] [hidden]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int64_t hidden)
      : fc1(register_module("fc1", torch::nn::Linear(hidden, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, hidden))),
        fc3(register_module("fc3", torch::nn::Linear(hidden, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1->forward(x));
    x = torch::relu(fc2->forward(x));
    return fc3->forward(x);
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);

int main(int argc, char **argv) {
  if (!torch::cuda::is_available()) {
    std::puts("no CUDA device");
    return 77;
  }
  const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
  const int64_t hidden = argc > 2 ? std::atoll(argv[2]) : 4096;
  torch::Device device(torch::kCUDA);
  torch::manual_seed(0);
  Mlp net(hidden);
  net->to(device);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto opts = torch::TensorOptions().device(device);
  torch::Tensor x = torch::randn({1024, hidden}, opts);
  torch::Tensor y = torch::randint(0, 10, {1024}, opts.dtype(torch::kLong));

  auto step = [&](int i) {
    opt.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    opt.step();
    if (i % 50 == 0)
      std::printf("step %d loss %.4f\n", i, loss.item<float>());
  };
  for (int i = 0; i < 5; ++i)  // warm-up: allocator, cuBLAS handles
    step(1);
  torch::cuda::synchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i)
    step(i);
  torch::cuda::synchronize();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
  std::printf("loop_ms=%.3f steps=%d hidden=%lld\n", ms, steps, static_cast<long long>(hidden));
  return 0;
}
