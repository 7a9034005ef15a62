// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-device-index-unchecked %t -- -- %libtorch_flags

#include <torch/torch.h>
#include <stdexcept>

void use(const torch::Tensor &t);

void positives(torch::Tensor x, torch::nn::Linear linear) {
  torch::Device second(torch::kCUDA, 1);
  // CHECK-MESSAGES: :[[@LINE-1]]:38: warning: hard-coded CUDA device ordinal 1 is never checked against torch::cuda::device_count(); CUDA_VISIBLE_DEVICES renumbers the devices a process sees, so ordinal 1 may not exist [torch-device-index-unchecked]
  auto a = torch::ones({2}, torch::TensorOptions().device(torch::kCUDA, 2));
  // CHECK-MESSAGES: :[[@LINE-1]]:73: warning: hard-coded CUDA device ordinal 2 is never checked
  auto b = torch::zeros({2}, torch::TensorOptions().device_index(3));
  // CHECK-MESSAGES: :[[@LINE-1]]:66: warning: hard-coded CUDA device ordinal 3 is never checked
  auto c = torch::empty({2}, torch::device_index(1));
  // CHECK-MESSAGES: :[[@LINE-1]]:50: warning: hard-coded CUDA device ordinal 1 is never checked
  x = x.to("cuda:3");
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: hard-coded CUDA device ordinal 3 is never checked
  linear->to(torch::Device("cuda:2"));
  // CHECK-MESSAGES: :[[@LINE-1]]:28: warning: hard-coded CUDA device ordinal 2 is never checked
  auto d = torch::randn({2}, torch::TensorOptions().device("cuda:1"));
  // CHECK-MESSAGES: :[[@LINE-1]]:60: warning: hard-coded CUDA device ordinal 1 is never checked
  use(a + b + c + d + x);
  x = x.to(second);
}

void bound_too_small(torch::Tensor x) {
  if (torch::cuda::device_count() > 1)
    x = x.to(torch::Device(torch::kCUDA, 3));
  // CHECK-MESSAGES: :[[@LINE-1]]:42: warning: hard-coded CUDA device ordinal 3 is above what the torch::cuda::device_count() check proves (2 devices)
  // CHECK-MESSAGES: :[[@LINE-3]]:35: note: the device count is compared here
  use(x);
}

void negatives(torch::Tensor x, int rank) {
  x = x.to(torch::Device(torch::kCUDA, 0));
  x = x.to("cuda:0");
  x = x.to("cuda");
  x = x.to(torch::Device(torch::kCUDA, rank));
  if (torch::cuda::device_count() < 4)
    throw std::runtime_error("need four GPUs");
  x = x.to(torch::Device(torch::kCUDA, 3));
  TORCH_CHECK(torch::cuda::device_count() > 2, "needs three GPUs");
  x = x.to(torch::TensorOptions().device(torch::kCUDA, 2));
  use(x);
}
