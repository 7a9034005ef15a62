// The fix-it that pins the source at its allocation is unsafe (pinned memory
// is a scarce, page-locked resource): it rides on the note, so plain --fix
// leaves the code alone and only --fix-notes applies it.
// RUN: %check_torch_tidy -check-suffix=SAFE %s torch-non-blocking-pageable %t
// RUN: %check_torch_tidy -check-suffix=UNSAFE %s torch-non-blocking-pageable %t -- --fix-notes

#include <torch/torch.h>

void factory_initialiser() {
  auto x = torch::randn({64, 3, 224, 224});
  // CHECK-FIXES-SAFE: {{^}}  auto x = torch::randn({64, 3, 224, 224});{{$}}
  // CHECK-FIXES-UNSAFE: {{^}}  auto x = torch::randn({64, 3, 224, 224}).pin_memory();{{$}}
  auto y = x.to(torch::kCUDA, /*non_blocking=*/true);
  // CHECK-MESSAGES-SAFE: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to CUDA from pageable memory
  // CHECK-MESSAGES-UNSAFE: :[[@LINE-2]]:14: warning: non_blocking copy of 'x' to CUDA from pageable memory
}

void no_fix_when_not_the_initialiser() {
  auto x = torch::zeros({8});
  x = x * 2;
  // CHECK-FIXES-UNSAFE: {{^}}  auto x = torch::zeros({8});{{$}}
  auto y = x.to(torch::kCUDA, true);
  // CHECK-MESSAGES-SAFE: :[[@LINE-1]]:14: warning: non_blocking copy of 'x' to CUDA
  // CHECK-MESSAGES-UNSAFE: :[[@LINE-2]]:14: warning: non_blocking copy of 'x' to CUDA
}
