// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-non-blocking-d2h-race %t -- -- %libtorch_flags

#include <torch/torch.h>
#include <iostream>

void consume(const torch::Tensor &t);

float race() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, /*non_blocking=*/true);
  float v = h.item<float>();
  // CHECK-MESSAGES: :[[@LINE-1]]:13: warning: 'h' is read on the host before the non-blocking device-to-host copy that produced it has completed; synchronise first (e.g. torch::cuda::synchronize() or stream.synchronize()) [torch-non-blocking-d2h-race]
  // CHECK-MESSAGES: :[[@LINE-3]]:14: note: non-blocking copy to the host starts here
  return v;
}

void streamed_and_passed(torch::Device device) {
  auto d = torch::ones({8}).to(device);
  auto h = d.to(torch::kCPU, true);
  std::cout << h << std::endl;
  // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: 'h' is read on the host before the non-blocking device-to-host copy
  auto h2 = torch::empty({8}, torch::TensorOptions().pinned_memory(true));
  h2.copy_(d, true);
  consume(h2);
  // CHECK-MESSAGES: :[[@LINE-1]]:11: warning: 'h2' is read on the host before the non-blocking device-to-host copy
}

float base_class_reads() {
  // data_ptr and accessor are at::TensorBase methods in the real headers.
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  float *p = h.data_ptr<float>();
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: 'h' is read on the host before the non-blocking device-to-host copy
  auto h2 = d.to(torch::kCPU, true);
  auto a = h2.accessor<float, 1>();
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: 'h2' is read on the host before the non-blocking device-to-host copy
  return p[0] + a[0];
}

float synchronised() {
  auto d = torch::randn({8}, torch::kCUDA);
  auto h = d.to(torch::kCPU, true);
  torch::cuda::synchronize();
  float v = h.item<float>();
  auto h2 = d.to(torch::kCPU, true);
  auto h3 = d.to(torch::kCPU);
  return v + h2.numel() + h3.item<float>();
}
