// The options ExtraPinnedAllocators and ExtraFactories.
//
// Without them, the project's own allocators are opaque:
// RUN: %check_torch_tidy -check-suffix=DEFAULT %s torch-non-blocking-pageable %t
// With them, one returns pinned memory and the other pageable memory:
// RUN: %check_torch_tidy -check-suffix=OPTIONS %s torch-non-blocking-pageable %t -- \
// RUN:   --config="{CheckOptions: {torch-non-blocking-pageable.ExtraPinnedAllocators: '::myproj::pinned_buffer', torch-non-blocking-pageable.ExtraFactories: 'myproj::host_buffer'}}"

#include <torch/torch.h>

namespace myproj {
torch::Tensor pinned_buffer(int64_t n);
torch::Tensor host_buffer(int64_t n, torch::TensorOptions options = {});
} // namespace myproj

void pinned_from_project_allocator() {
  // An opaque call proves nothing; a pinned allocator proves pinned memory.
  auto x = myproj::pinned_buffer(8);
  auto y = x.to(torch::kCUDA, true);
}

void copy_of_a_pinned_buffer() {
  // Only the option tells that the buffer is on the CPU, so that its clone
  // is fresh pageable memory.
  auto buf = myproj::pinned_buffer(8);
  auto x = buf.clone();
  auto y = x.to(torch::kCUDA, true);
  // CHECK-MESSAGES-OPTIONS: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to CUDA from pageable memory
  // CHECK-MESSAGES-OPTIONS: :[[@LINE-3]]:16: note: 'x' was allocated in pageable memory here
}

void pinned_buffer_copy() {
  auto dst = torch::empty({8}, torch::kCUDA);
  auto src = myproj::pinned_buffer(8);
  dst.copy_(src, true);
}

void pageable_from_project_factory() {
  auto x = myproj::host_buffer(8);
  auto y = x.to(torch::kCUDA, true);
  // CHECK-MESSAGES-OPTIONS: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to CUDA from pageable memory
}

void still_flagged_with_options() {
  auto x = torch::randn({8});
  auto y = x.to(torch::kCUDA, true);
  // CHECK-MESSAGES-DEFAULT: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to CUDA from pageable memory
  // CHECK-MESSAGES-OPTIONS: :[[@LINE-2]]:14: warning: non_blocking copy of 'x' to CUDA from pageable memory
}
