// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-cuda-unguarded %t -- -- %libtorch_flags

// torch-cuda-unguarded on the real LibTorch headers: the real TORCH_CHECK
// (`if (C10_UNLIKELY_OR_CONST(!(cond)))` around __builtin_expect), the real
// TensorOptions / Device conversions, Module::to and Tensor::cuda.

#include <torch/torch.h>
#include <cstdlib>
#include <stdexcept>

struct Net : torch::nn::Module {
  Net() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc->forward(x); }
  torch::nn::Linear fc{nullptr};
};

void unguarded(std::shared_ptr<Net> net, torch::Tensor &x) {
  net->to(torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:11: warning: CUDA device selected without checking torch::cuda::is_available(); this crashes on a machine without a working CUDA [torch-cuda-unguarded]
  // One warning per path; the other selections on it are notes.
  x = x.cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:9: note: CUDA is selected here too, on the same path
  x = x.to("cuda:0");
  // CHECK-MESSAGES: :[[@LINE-1]]:12: note: CUDA is selected here too
  auto y = torch::ones({2}, torch::TensorOptions().device(torch::kCUDA));
  // CHECK-MESSAGES: :[[@LINE-1]]:59: note: CUDA is selected here too
  torch::Device device(torch::kCUDA, 0);
  // CHECK-MESSAGES: :[[@LINE-1]]:24: note: CUDA is selected here too
  (void)y;
  (void)device;
}

void guard_elsewhere(torch::Tensor &x) {
  if (torch::cuda::is_available())
    std::puts("CUDA");
  x = x.to(torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: CUDA device selected without checking
  // CHECK-MESSAGES: :[[@LINE-4]]:7: note: an availability check here does not protect this use
}

void torch_check(std::shared_ptr<Net> net, torch::Tensor &x) {
  TORCH_CHECK(torch::cuda::is_available(), "this program needs a GPU");
  net->to(torch::kCUDA);
  x = x.cuda();
}

void torch_check_count(torch::Tensor &x) {
  TORCH_CHECK(torch::cuda::device_count() > 0, "no GPU: ", 0);
  x = x.to(torch::Device("cuda:0"));
}

torch::Tensor guarded(torch::Tensor x) {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  x = x.to(device);
  if (!torch::cuda::is_available())
    throw std::runtime_error("no CUDA");
  return x.cuda();
}

torch::Device pick_device() {
  if (torch::cuda::is_available())
    return torch::kCUDA;
  return torch::kCPU;
}

void train_on_gpu(std::shared_ptr<Net> net) { net->to(torch::kCUDA); }

int main() {
  auto net = std::make_shared<Net>();
  net->to(pick_device());
  if (torch::cuda::is_available())
    train_on_gpu(net);
  return 0;
}

// Across calls, on the real headers: the device is a member set in the
// constructor's init list; a helper that moves what it is given.
class Trainer {
public:
  Trainer() : device_(torch::kCUDA) { net_->to(device_); }
  // CHECK-MESSAGES: :[[@LINE-1]]:23: warning: CUDA device selected without checking torch::cuda::is_available()
  // CHECK-MESSAGES: :[[@LINE+10]]:11: note: reached from here without a check

private:
  torch::Device device_;
  std::shared_ptr<Net> net_ = std::make_shared<Net>();
};

torch::Tensor to_gpu(const torch::Tensor &t) { return t.to(torch::kCUDA); }

void fit() {
  Trainer trainer;
  if (torch::cuda::is_available()) {
    auto x = to_gpu(torch::ones({2}));
    (void)x;
  }
}
