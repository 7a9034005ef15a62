// Seeded bug (torch-non-blocking-pageable): non_blocking=true from pageable
// memory. CUDA stages a pageable source through a pinned buffer and copies it
// synchronously, so the flag buys no overlap.
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
    torch::Tensor batch = torch::randn({512, 1024});
    torch::Tensor x = batch.to(device, /*non_blocking=*/true);
    acc += net->forward(x).sum();
  }
  torch::cuda::synchronize();
  std::printf("done: %f\n", acc.item<double>());
  return 0;
}
