// RUN: %check_torch_tidy %s torch-device-mismatch,torch-non-blocking-pageable %t
// RUN: %check_torch_tidy %s torch-device-mismatch,torch-non-blocking-pageable %t -- -- -isystem %S/Inputs/libtorch-1.13

// Tensor::to and the factories take their optional arguments as
// std::optional in LibTorch 2.x (c10::optional is an alias of it) and as
// c10::optional, a class of its own, in 1.13 (the second RUN line): a device
// or a pinning request that reaches them through either is seen the same.

#include <torch/torch.h>

void seven_argument_to(torch::Tensor x) {
  auto y = x.to(c10::nullopt, c10::nullopt, torch::Device(torch::kCUDA, 1), c10::nullopt,
                /*non_blocking=*/false, /*copy=*/false, c10::nullopt);
  auto z = torch::zeros({2});
  y + z;
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: operator '+' combines 'y' on cuda:1 with 'z' on CPU
}

void factory_with_memory_format() {
  auto e = torch::empty({4}, torch::TensorOptions().device(torch::kCUDA), torch::MemoryFormat::Contiguous);
  auto c = torch::ones({4});
  e * c;
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: operator '*' combines 'e' on CUDA with 'c' on CPU
}

void pinned_through_optional_bool() {
  auto pinned = torch::empty({4}, torch::TensorOptions().pinned_memory(true));
  auto a = pinned.to(torch::kCUDA, /*non_blocking=*/true);
  auto pageable = torch::empty({4}, torch::TensorOptions().pinned_memory(false));
  auto b = pageable.to(torch::kCUDA, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:21: warning: non_blocking copy of 'pageable' to CUDA from pageable memory runs synchronously
  // CHECK-MESSAGES: :[[@LINE-3]]:19: note: 'pageable' was allocated in pageable memory here
  a + b;
}
