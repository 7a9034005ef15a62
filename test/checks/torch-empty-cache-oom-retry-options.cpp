// ExtraEmptyCacheFunctions and OutOfMemoryMessages change what counts.
// RUN: %check_torch_tidy %s torch-empty-cache-oom-retry %t
// RUN: %check_torch_tidy -check-suffix=EXTRA %s torch-empty-cache-oom-retry %t \
// RUN:   -- --config="{CheckOptions: {torch-empty-cache-oom-retry.ExtraEmptyCacheFunctions: 'gpu::release_cached_memory'}}"
// RUN: %check_torch_tidy -check-suffix=MSG %s torch-empty-cache-oom-retry %t \
// RUN:   -- --config="{CheckOptions: {torch-empty-cache-oom-retry.OutOfMemoryMessages: 'allocation failed'}}"

#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <string>

namespace gpu {
void release_cached_memory();
}
torch::Tensor train_step(const torch::Tensor &batch);

void project_release_function(const torch::Tensor &batch) {
  try {
    train_step(batch);
  } catch (const c10::OutOfMemoryError &) {
    gpu::release_cached_memory();
    // CHECK-MESSAGES-EXTRA: :[[@LINE-1]]:5: warning: 'emptyCache()' before retrying after an out-of-memory error does not help
    // CHECK-MESSAGES-EXTRA: :[[@LINE-3]]:5: note: the out-of-memory handler
    // CHECK-MESSAGES-EXTRA: :[[@LINE+1]]:5: note: the same call is retried here with unchanged arguments
    train_step(batch);
  }
}

void project_message(const torch::Tensor &batch) {
  try {
    train_step(batch);
  } catch (const c10::Error &e) {
    if (std::string(e.what()).find("allocation failed") == std::string::npos)
      throw;
    c10::cuda::CUDACachingAllocator::emptyCache();
    // CHECK-MESSAGES-MSG: :[[@LINE-1]]:5: warning: 'emptyCache()' before retrying after an out-of-memory error does not help
    // CHECK-MESSAGES-MSG: :[[@LINE-5]]:5: note: the handler that tests for an out-of-memory error
    // CHECK-MESSAGES-MSG: :[[@LINE+1]]:5: note: the same call is retried here
    train_step(batch);
  }
}

// The default messages warn here (and MSG, which replaces them, does not).
void default_message(const torch::Tensor &batch) {
  try {
    train_step(batch);
  } catch (const c10::Error &e) {
    if (std::string(e.what()).find("out of memory") == std::string::npos)
      throw;
    c10::cuda::CUDACachingAllocator::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' before retrying
    // CHECK-MESSAGES: :[[@LINE-5]]:5: note: the handler that tests for an out-of-memory error
    // CHECK-MESSAGES: :[[@LINE+3]]:5: note: the same call is retried here
    // CHECK-MESSAGES-EXTRA: :[[@LINE-4]]:5: warning: 'emptyCache()' before retrying
    // CHECK-MESSAGES-EXTRA: :[[@LINE-8]]:5: note: the handler that tests for an out-of-memory error
    train_step(batch);
    // CHECK-MESSAGES-EXTRA: :[[@LINE-1]]:5: note: the same call is retried here
  }
}
