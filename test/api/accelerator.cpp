// RUN: %check_torch_tidy %s torch-empty-cache-in-loop,torch-host-sync-in-loop,torch-non-blocking-d2h-race,torch-device-index-unchecked,torch-cuda-unguarded %t

// at::accelerator (LibTorch 2.7+; emptyCache 2.8+), also spelt
// torch::accelerator: emptyCache() is the caching allocator's,
// synchronizeDevice() blocks the host like torch::cuda::synchronize(), and
// deviceCount() is a device count and an availability check. LibTorch 1.13
// and 2.6 have none of it; their spellings are torch::cuda::synchronize(),
// torch::cuda::device_count() and CUDACachingAllocator::emptyCache().

#include <torch/torch.h>
#include <ATen/DeviceAccelerator.h>

torch::Tensor next_input();

void empty_cache_in_loop(int steps) {
  for (int i = 0; i < steps; ++i) {
    at::accelerator::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop synchronises the device
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: the loop that repeats the call
    torch::accelerator::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop synchronises the device
    // CHECK-MESSAGES: :[[@LINE-6]]:3: note: the loop that repeats the call
  }
}

void synchronize_every_step(torch::nn::Linear &model, torch::optim::Optimizer &optimizer) {
  if (!torch::cuda::is_available())
    return;
  model->to(torch::kCUDA);
  for (int step = 0; step < 100; ++step) {
    auto loss = model(next_input().cuda()).sum();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    at::accelerator::synchronizeDevice(0);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'at::accelerator::synchronizeDevice(0)' blocks the host until the GPU is idle on every training step
  }
}

float read_after_synchronize_device() {
  if (!torch::cuda::is_available())
    return 0;
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, /*non_blocking=*/true);
  torch::accelerator::synchronizeDevice(0);
  return h.item<float>();
}

float read_before_synchronize_device() {
  if (!torch::cuda::is_available())
    return 0;
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, /*non_blocking=*/true);
  float v = h.item<float>();
  // CHECK-MESSAGES: :[[@LINE-1]]:13: warning: 'h' is read on the host before the non-blocking device-to-host copy
  // CHECK-MESSAGES: :[[@LINE-3]]:14: note: non-blocking copy to the host starts here
  at::accelerator::synchronizeDevice(0);
  return v;
}

void ordinal_checked_by_device_count(torch::Tensor x) {
  if (at::accelerator::deviceCount() < 2)
    return;
  x = x.to(torch::Device(torch::kCUDA, 1));
  x = x.to(torch::Device(torch::kCUDA, at::accelerator::getDeviceIndex()));
}

void ordinal_above_the_count(torch::Tensor x) {
  if (torch::accelerator::deviceCount() > 1)
    x = x.to(torch::Device(torch::kCUDA, 3));
  // CHECK-MESSAGES: :[[@LINE-1]]:42: warning: hard-coded CUDA device ordinal 3 is above what the torch::cuda::device_count() check proves (2 devices)
  // CHECK-MESSAGES: :[[@LINE-3]]:41: note: the device count is compared here
}
