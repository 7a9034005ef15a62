#include "gan.h"

#include <c10/cuda/CUDACachingAllocator.h>


// Points on a noisy ring, generated on the host.
torch::Tensor sample_real(int64_t n) {
  auto angle = torch::rand({n}) * (2 * 3.14159265358979);
  return torch::stack({torch::cos(angle), torch::sin(angle)}, 1) + 0.05 * torch::randn({n, kData});
}

void end_of_epoch() {
  // BUG(torch-empty-cache-in-loop): train_gan() (train.cpp) calls this at the
  // end of every epoch of its loop.
  c10::cuda::CUDACachingAllocator::emptyCache();
}

torch::Device sampling_device() {
  // BUG(torch-device-index-unchecked): nothing in the program compares
  // device_count() with 2 before main.cpp samples on this device.
  return torch::Device("cuda:1");
}
