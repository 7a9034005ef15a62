// RUN: %check_torch_tidy %s torch-device-mismatch,torch-non-blocking-pageable %t

// The SymInt overloads of the factories and views (randn_symint,
// empty_symint, view_symint, new_empty_symint, ...; LibTorch 2.x declares one
// for every function that takes sizes): the same facts as the plain ones.

#include <torch/torch.h>

void factories(c10::SymInt n) {
  auto a = torch::randn_symint({n, 4}, torch::kCUDA);
  auto b = torch::zeros_symint({n, 4});
  a + b;
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: operator '+' combines 'a' on CUDA with 'b' on CPU
  auto c = torch::full_symint({n}, 1.0, torch::TensorOptions().device(torch::kCUDA, 1));
  auto d = torch::ones_symint({n});
  c * d;
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: operator '*' combines 'c' on cuda:1 with 'd' on CPU
}

void views_keep_the_device(c10::SymInt n) {
  auto a = torch::randn({8}, torch::kCUDA).view_symint({n});
  auto b = torch::ones({8}).reshape_symint({n});
  torch::cat({a, b});
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: 'at::cat' combines 'a' on CUDA with 'b' on CPU
  auto e = a.new_empty_symint({n});
  torch::cat({a, e});
}

void pageable_source(c10::SymInt n) {
  auto h = torch::empty_symint({n});
  auto d = h.to(torch::kCUDA, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: non_blocking copy of 'h' to CUDA from pageable memory runs synchronously
  // CHECK-MESSAGES: :[[@LINE-3]]:12: note: 'h' was allocated in pageable memory here
  auto p = torch::empty_symint({n}, torch::TensorOptions().pinned_memory(true));
  auto q = p.to(torch::kCUDA, /*non_blocking=*/true);
}
