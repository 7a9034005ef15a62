// RUN: %check_torch_tidy -check-suffix=,2X %s torch-empty-cache-in-loop,torch-empty-cache-oom-retry %t -- -- -DLIBTORCH_2X
// RUN: %check_torch_tidy %s torch-empty-cache-in-loop,torch-empty-cache-oom-retry %t -- -- -isystem %S/Inputs/libtorch-1.13

// LibTorch 2.x: CUDACachingAllocator::emptyCache() is an inline wrapper that
// forwards to the allocator object, and code calls the object directly too
// (get()->emptyCache(), the 2X lines). Both spellings are the same call.
// LibTorch 1.13 (the second RUN line): a plain declaration, and get()
// returns the generic c10::Allocator, which has no emptyCache().

#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

namespace alloc = c10::cuda::CUDACachingAllocator;

void in_loop(int steps) {
  for (int i = 0; i < steps; ++i) {
    alloc::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop synchronises the device
#ifdef LIBTORCH_2X
    alloc::get()->emptyCache();
    // CHECK-MESSAGES-2X: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop synchronises the device
#endif
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

#ifdef LIBTORCH_2X
void oom_retry_through_the_allocator(const torch::Tensor &batch) {
  try {
    step(batch);
  } catch (const c10::OutOfMemoryError &) {
    c10::cuda::CUDACachingAllocator::get()->emptyCache();
    // CHECK-MESSAGES-2X: :[[@LINE-1]]:5: warning: 'emptyCache()' before retrying after an out-of-memory error does not help
    step(batch);
  }
}

void once_after(int steps) {
  for (int i = 0; i < steps; ++i)
    alloc::resetPeakStats(0);
  alloc::get()->emptyCache();
}
#endif
