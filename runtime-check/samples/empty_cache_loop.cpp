// Seeded bug (torch-empty-cache-in-loop): emptyCache() every step returns the
// cached blocks with cudaFree, and the next step cudaMallocs them again.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdio>

int main() {
  if (!torch::cuda::is_available()) {
    std::puts("no CUDA device");
    return 77;
  }
  torch::Device device(torch::kCUDA);
  torch::Tensor acc = torch::zeros({}, torch::TensorOptions().device(device));
  for (int step = 0; step < 20; ++step) {
    torch::Tensor a = torch::randn({1024, 1024}, torch::TensorOptions().device(device));
    acc += a.matmul(a).sum();
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
  torch::cuda::synchronize();
  std::printf("done: %f\n", acc.item<double>());
  return 0;
}
