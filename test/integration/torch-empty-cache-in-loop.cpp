// REQUIRES: libtorch, cuda-headers
// RUN: %check_torch_tidy %s torch-empty-cache-in-loop %t -- -- %libtorch_flags

// torch-empty-cache-in-loop on the real Debian libtorch-dev 1.13 headers.

#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <vector>

namespace alloc = c10::cuda::CUDACachingAllocator;

void train(torch::nn::Linear &model, torch::optim::SGD &optimizer,
           const std::vector<torch::Tensor> &batches) {
  for (const auto &x : batches) {
    optimizer.zero_grad();
    model(x).sum().backward();
    optimizer.step();
    c10::cuda::CUDACachingAllocator::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop synchronises the device and returns cached blocks with cudaFree every iteration; the next iteration must cudaMalloc them again and the peak memory stays the same [torch-empty-cache-in-loop]
    // CHECK-MESSAGES: :[[@LINE-6]]:3: note: the loop that repeats the call
  }
}

void epochs(int n) {
  int epoch = 0;
  while (epoch++ < n) {
    alloc::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: the loop that repeats the call
  }
}

void via_using(int n) {
  using c10::cuda::CUDACachingAllocator::emptyCache;
  do {
    emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop
  } while (--n > 0);
}

void via_lambda(int steps) {
  for (int i = 0; i < steps; ++i) {
    auto release = [] { alloc::emptyCache(); };
    // CHECK-MESSAGES: :[[@LINE-1]]:25: warning: 'emptyCache()' inside a loop
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: the loop that repeats the call
    // CHECK-MESSAGES: :[[@LINE-3]]:20: note: called through this lambda
    release();
  }
}

// Negatives: once after the loop, a lambda defined outside the loop, other
// allocator functions, and a suppressed call.

void after_training(torch::nn::Linear &model, int steps) {
  for (int i = 0; i < steps; ++i)
    model(torch::randn({4, 8})).sum().backward();
  c10::cuda::CUDACachingAllocator::emptyCache();
}

void lambda_defined_outside(int steps) {
  auto release = [] { alloc::emptyCache(); };
  for (int i = 0; i < steps; ++i)
    (void)i;
  release();
}

void other_allocator_calls(int steps) {
  for (int i = 0; i < steps; ++i) {
    alloc::resetPeakStats(0);
    (void)alloc::getDeviceStats(0);
  }
}

void suppressed(int steps) {
  for (int i = 0; i < steps; ++i)
    alloc::emptyCache(); // NOLINT(torch-empty-cache-in-loop)
}
