// Clean twin of pageable_non_blocking.cpp: the batch is pinned, so the
// non_blocking copy is truly asynchronous and can overlap compute.
// Same line numbers as the bug.
#include <torch/torch.h>

#include <cstdio>

int main() {
  if (!torch::cuda::is_available()) {
    std::puts("no CUDA device");
    return 77;
  }
  torch::Device device(torch::kCUDA);
  torch::nn::Linear net(1024, 1024);
  net->to(device);
  torch::Tensor acc = torch::zeros({}, torch::TensorOptions().device(device));
  for (int step = 0; step < 20; ++step) {
    torch::Tensor batch = torch::randn({512, 1024}).pin_memory();
    torch::Tensor x = batch.to(device, /*non_blocking=*/true);
    acc += net->forward(x).sum();
  }
  torch::cuda::synchronize();
  std::printf("done: %f\n", acc.item<double>());
  return 0;
}
