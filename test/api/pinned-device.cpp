// RUN: %check_torch_tidy %s torch-non-blocking-pageable %t
// RUN: %check_torch_tidy %s torch-non-blocking-pageable %t -- -- -isystem %S/Inputs/libtorch-1.13

// Tensor::is_pinned and Tensor::pin_memory with the device argument
// (std::optional<Device> in 2.x, c10::optional<Device> in 1.13, second RUN
// line): the result is pinned host memory and the query proves pinning,
// whichever device they name.

#include <torch/torch.h>

void pin_for_device() {
  auto h = torch::ones({4}).pin_memory(torch::kCUDA);
  auto d = h.to(torch::kCUDA, /*non_blocking=*/true);
  auto g = torch::ones({4}).pin_memory(torch::Device(torch::kCUDA, 0));
  auto e = g.to(torch::kCUDA, /*non_blocking=*/true);
}

void query_for_device(bool fresh) {
  auto x = torch::ones({4});
  if (x.is_pinned(torch::kCUDA))
    auto d = x.to(torch::kCUDA, /*non_blocking=*/true);
  auto y = torch::ones({4});
  if (!y.is_pinned(torch::Device(torch::kCUDA)))
    auto d = y.to(torch::kCUDA, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: non_blocking copy of 'y' to CUDA from pageable memory runs synchronously
  // CHECK-MESSAGES: :[[@LINE-4]]:12: note: 'y' was allocated in pageable memory here
}
