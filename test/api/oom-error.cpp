// RUN: %check_torch_tidy %s torch-empty-cache-oom-retry %t

// The out-of-memory exception is c10::OutOfMemoryError in LibTorch 1.13 and
// 2.x (test/checks/torch-empty-cache-oom-retry.cpp); torch::OutOfMemoryError
// and at::OutOfMemoryError name the same class (torch and at pull in c10's
// names).

#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

torch::Tensor step(const torch::Tensor &batch);

void torch_spelling(const torch::Tensor &batch) {
  try {
    step(batch);
  } catch (torch::OutOfMemoryError &e) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' before retrying after an out-of-memory error does not help
    // CHECK-MESSAGES: :[[@LINE-3]]:5: note: the out-of-memory handler
    // CHECK-MESSAGES: :[[@LINE+1]]:5: note: the same call is retried here with unchanged arguments
    step(batch);
  }
}

void at_spelling_halves_the_batch(int64_t batch_size) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      step(torch::randn({batch_size, 3}));
      break;
    } catch (const at::OutOfMemoryError &) {
      c10::cuda::CUDACachingAllocator::emptyCache();
      batch_size /= 2;
    }
  }
}
