// Clean twin of d2h_race.cpp: the stream is synchronised before the host
// reads the copy. Same line numbers as the bug.
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
    torch::cuda::synchronize();
    total += h.item<float>();
  }
  std::printf("done: %f\n", total);
  return 0;
}
