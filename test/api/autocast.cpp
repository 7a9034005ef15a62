// RUN: %check_torch_tidy %s torch-cuda-unguarded,torch-inference-without-no-grad %t

// at::autocast (also spelt torch::autocast): LibTorch 2.x takes the device
// type (set_autocast_enabled(at::kCUDA, true)); 1.13's CUDA-only
// set_enabled(bool) is deprecated in 2.x and still declared. Enabling
// autocast for CUDA selects no device, so it needs no availability check;
// and it is not a no-grad mode.

#include <torch/torch.h>
#include <ATen/autocast_mode.h>

struct NetImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Net);

torch::Tensor next_input();

void enable_mixed_precision() {
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  torch::autocast::set_autocast_dtype(torch::kCUDA, torch::kHalf);
  if (at::autocast::is_autocast_enabled(c10::DeviceType::CUDA))
    at::autocast::clear_cache();
}

void legacy_spelling() { at::autocast::set_enabled(true); }

torch::Tensor autocast_is_no_guard(torch::Tensor x) {
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  return x.cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: CUDA device selected without checking torch::cuda::is_available()
}

double evaluate_under_autocast(Net net) {
  at::autocast::set_autocast_enabled(at::kCPU, true);
  double sum = 0;
  for (int i = 0; i < 100; ++i) {
    auto y = net(next_input());
    // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop runs no backward() or optimizer step
    sum += y.sum().item<double>();
  }
  at::autocast::set_autocast_enabled(at::kCPU, false);
  return sum;
}
