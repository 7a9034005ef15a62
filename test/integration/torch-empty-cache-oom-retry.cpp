// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-empty-cache-oom-retry %t -- -- %libtorch_flags

#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <string>

torch::Tensor train_step(const torch::Tensor &batch);

void retry_in_handler(const torch::Tensor &batch) {
  try {
    train_step(batch);
  } catch (const c10::OutOfMemoryError &) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' before retrying after an out-of-memory error does not help: the caching allocator already frees its cached blocks before it raises OOM; retry with a smaller batch and gradient accumulation, or use activation checkpointing [torch-empty-cache-oom-retry]
    // CHECK-MESSAGES: :[[@LINE-3]]:5: note: the out-of-memory handler
    // CHECK-MESSAGES: :[[@LINE+1]]:5: note: the same call is retried here with unchanged arguments
    train_step(batch);
  }
}

void retry_loop(torch::nn::Linear net, const torch::Tensor &x) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      auto y = net(x);
      break;
    } catch (const c10::Error &e) {
      if (std::string(e.what()).find("CUDA out of memory") == std::string::npos)
        throw;
      c10::cuda::CUDACachingAllocator::emptyCache();
      // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: 'emptyCache()' before retrying
      // CHECK-MESSAGES: :[[@LINE-5]]:7: note: the handler that tests for an out-of-memory error
      // CHECK-MESSAGES: :[[@LINE-10]]:3: note: this loop runs the try block again with unchanged inputs
    }
  }
}

void negatives(int64_t batch_size, const torch::Tensor &batch) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      train_step(torch::randn({batch_size, 3}));
      break;
    } catch (const c10::OutOfMemoryError &) {
      c10::cuda::CUDACachingAllocator::emptyCache();
      batch_size /= 2;
    }
  }
  try {
    train_step(batch);
  } catch (const c10::OutOfMemoryError &) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    throw;
  }
  try {
    train_step(batch);
  } catch (...) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    train_step(batch);
  }
}
