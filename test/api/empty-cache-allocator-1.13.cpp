// RUN: %check_torch_tidy %s torch-empty-cache-in-loop,torch-empty-cache-oom-retry %t -- -- -isystem %S/Inputs/libtorch-1.13

// LibTorch 1.13: CUDACachingAllocator::emptyCache() is a plain declaration,
// and get() returns the generic c10::Allocator, which has no emptyCache().

#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

namespace alloc = c10::cuda::CUDACachingAllocator;

void in_loop(int steps) {
  for (int i = 0; i < steps; ++i) {
    alloc::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop synchronises the device
    alloc::resetPeakStats(0);
  }
}

torch::Tensor step(const torch::Tensor &batch);

void oom_retry(const torch::Tensor &batch) {
  try {
    step(batch);
  } catch (const c10::OutOfMemoryError &) {
    alloc::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' before retrying after an out-of-memory error does not help
    step(batch);
  }
}
