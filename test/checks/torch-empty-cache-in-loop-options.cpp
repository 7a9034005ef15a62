// The option ExtraEmptyCacheFunctions: a project's own wrapper around
// emptyCache() is flagged in a loop like emptyCache() itself.
// RUN: %check_torch_tidy %s torch-empty-cache-in-loop %t
// RUN: %check_torch_tidy -check-suffix=EXTRA %s torch-empty-cache-in-loop %t \
// RUN:   -- --config="{CheckOptions: {torch-empty-cache-in-loop.ExtraEmptyCacheFunctions: 'mylib::release_gpu_memory;::mylib::Pool::trim'}}"

#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

namespace mylib {
void release_gpu_memory();
struct Pool {
  static void trim();
};
void log_memory();
} // namespace mylib

void train_step();

void wrapper_in_loop() {
  for (int i = 0; i < 10; ++i) {
    train_step();
    mylib::release_gpu_memory();
    // CHECK-MESSAGES-EXTRA: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop synchronises the device{{.*}}[torch-empty-cache-in-loop]
    // CHECK-MESSAGES-EXTRA: :[[@LINE-4]]:3: note: the loop that repeats the call
  }
}

void static_method_in_loop(int steps) {
  while (steps-- > 0)
    mylib::Pool::trim();
  // CHECK-MESSAGES-EXTRA: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop
}

void wrapper_after_loop() {
  for (int i = 0; i < 10; ++i)
    train_step();
  mylib::release_gpu_memory();
}

void other_function_in_loop() {
  for (int i = 0; i < 10; ++i)
    mylib::log_memory();
}

// The built-in spelling is flagged with and without the option.
void builtin_in_loop() {
  for (int i = 0; i < 10; ++i)
    c10::cuda::CUDACachingAllocator::emptyCache();
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'emptyCache()' inside a loop
  // CHECK-MESSAGES-EXTRA: :[[@LINE-2]]:5: warning: 'emptyCache()' inside a loop
}
