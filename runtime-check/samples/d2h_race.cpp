// Seeded bug (torch-non-blocking-d2h-race): a non_blocking copy to the host
// is read before any synchronisation, so the host may read stale memory.
#include <torch/torch.h>

#include <cstdio>

int main() {
  if (!torch::cuda::is_available()) {
    std::puts("no CUDA device");
    return 77;
  }
  torch::Device device(torch::kCUDA);
  torch::Tensor w = torch::randn({1024, 1024}, torch::TensorOptions().device(device));
  double total = 0;
  for (int step = 0; step < 10; ++step) {
    torch::Tensor d = w.matmul(w).sum();
    torch::Tensor h = d.to(torch::kCPU, /*non_blocking=*/true);
    // (no synchronisation here)
    total += h.item<float>();
  }
  std::printf("done: %f\n", total);
  return 0;
}
