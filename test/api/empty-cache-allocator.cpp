// RUN: %check_torch_tidy %s torch-empty-cache-in-loop,torch-empty-cache-oom-retry %t

// LibTorch 2.x: CUDACachingAllocator::emptyCache() is an inline wrapper that
// forwards to the allocator object, and code calls the object directly too
// (get()->emptyCache()). Both spellings are the same call. The 1.13
// declaration: empty-cache-allocator-1.13.cpp.

#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

namespace alloc = c10::cuda::CUDACachingAllocator;

void in_loop(int steps) {
  for (int i = 0; i < steps; ++i) {
    alloc::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop synchronises the device
    alloc::get()->emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop synchronises the device
    alloc::resetPeakStats(0);
  }
}

torch::Tensor step(const torch::Tensor &batch);

void oom_retry(const torch::Tensor &batch) {
  try {
    step(batch);
  } catch (const c10::OutOfMemoryError &) {
    c10::cuda::CUDACachingAllocator::get()->emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' before retrying after an out-of-memory error does not help
    step(batch);
  }
}

void once_after(int steps) {
  for (int i = 0; i < steps; ++i)
    alloc::resetPeakStats(0);
  alloc::get()->emptyCache();
}
