// The options GuardFunctions and DeviceSelectorFunctions.
//
// Without them, the project's own check and device selector are opaque:
// RUN: %check_torch_tidy -check-suffix=DEFAULT %s torch-cuda-unguarded %t
// With them, the same code is guarded:
// RUN: %check_torch_tidy -check-suffix=OPTIONS %s torch-cuda-unguarded %t -- \
// RUN:   --config="{CheckOptions: {torch-cuda-unguarded.GuardFunctions: '::myproj::has_gpu;myproj::Env::gpu_count', torch-cuda-unguarded.DeviceSelectorFunctions: '::myproj::select_device'}}"

#include <torch/torch.h>
#include <cstdlib>

namespace myproj {
bool has_gpu();
struct Env {
  static int gpu_count();
};

// Picks CUDA when the user asks for it and it is there; the check inside is
// not visible to the analysis (it reads an environment variable).
torch::Device select_device(torch::Device preferred) {
  if (std::getenv("MYPROJ_FORCE_CPU"))
    return torch::kCPU;
  return preferred;
}

torch::Device select_device() {
  return torch::Device(torch::kCUDA);
  // CHECK-MESSAGES-DEFAULT: :[[@LINE-1]]:24: warning: CUDA device selected without checking
}
} // namespace myproj

void custom_guard(torch::Tensor &x) {
  if (myproj::has_gpu())
    x = x.cuda();
  // CHECK-MESSAGES-DEFAULT: :[[@LINE-1]]:11: warning: CUDA device selected without checking
}

void custom_guard_early_exit(torch::Tensor &x) {
  if (myproj::Env::gpu_count() < 1)
    std::exit(1);
  x = x.to(torch::kCUDA);
  // CHECK-MESSAGES-DEFAULT: :[[@LINE-1]]:12: warning: CUDA device selected without checking
}

void selector_preference(torch::Tensor &x) {
  torch::Device device = myproj::select_device(torch::kCUDA);
  // CHECK-MESSAGES-DEFAULT: :[[@LINE-1]]:48: warning: CUDA device selected without checking
  x = x.to(device);
}

void selector_string(torch::Tensor &x) {
  x = x.to(myproj::select_device(torch::Device("cuda:0")));
  // CHECK-MESSAGES-DEFAULT: :[[@LINE-1]]:48: warning: CUDA device selected without checking
}
