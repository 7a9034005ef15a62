// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-tensor-to-discarded %t -- -- %libtorch_flags

#include <torch/torch.h>

void use(const torch::Tensor &t);

void positives(torch::Tensor x, torch::Device device, const torch::Tensor &other) {
  x.to(device);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.to(...)' is discarded; tensor conversions return a new tensor and leave 'x' unchanged; only Module::to moves in place [torch-tensor-to-discarded]
  // CHECK-FIXES: {{^}}  x = x.to(device);{{$}}
  x.to(torch::kHalf);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.to(...)' is discarded
  // CHECK-FIXES: {{^}}  x = x.to(torch::kHalf);{{$}}
  x.to(torch::kCUDA, torch::kFloat, /*non_blocking=*/true);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.to(...)' is discarded
  // CHECK-FIXES: {{^}}  x = x.to(torch::kCUDA, torch::kFloat, /*non_blocking=*/true);{{$}}
  x.to(other);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.to(...)' is discarded
  // CHECK-FIXES: {{^}}  x = x.to(other);{{$}}
  x.cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.cuda()' is discarded
  // CHECK-FIXES: {{^}}  x = x.cuda();{{$}}
  x.cpu();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.cpu()' is discarded
  // CHECK-FIXES: {{^}}  x = x.cpu();{{$}}
  x.pin_memory();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.pin_memory()' is discarded
  // CHECK-FIXES: {{^}}  x = x.pin_memory();{{$}}
  x.contiguous();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.contiguous()' is discarded
  // CHECK-FIXES: {{^}}  x = x.contiguous();{{$}}
  x.detach();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.detach()' is discarded
  // CHECK-FIXES: {{^}}  x = x.detach();{{$}}
  x.toType(torch::kFloat);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.toType(...)' is discarded
  // CHECK-FIXES: {{^}}  x = x.toType(torch::kFloat);{{$}}
  other.clone();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'other.clone()' is discarded
  // CHECK-FIXES: {{^}}  other.clone();{{$}}
  use(x);
}

void negatives(torch::Tensor x, torch::nn::Linear linear, torch::Device device) {
  x = x.to(device);
  auto y = x.cuda();
  (void)x.cpu();
  linear->to(device);
  linear->to(torch::kHalf);
  x.copy_(y);
  x.detach_();
  use(x.pin_memory());
}
