// The fix-it that switches the module to evaluation mode before the loop
// that evaluates it is unsafe (it changes what runs, and the program may need
// train() again afterwards): it rides on the note, so plain --fix leaves the
// code alone and only --fix-notes applies it.
// RUN: %check_torch_tidy -check-suffix=SAFE %s torch-eval-mode-missing %t
// RUN: %check_torch_tidy -check-suffix=UNSAFE %s torch-eval-mode-missing %t -- --fix-notes

#include <torch/torch.h>
#include <memory>

struct NetImpl : torch::nn::Module {
  NetImpl() { drop = register_module("drop", torch::nn::Dropout(0.5)); }
  torch::Tensor forward(torch::Tensor x) { return drop(x); }
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Net);

torch::Tensor batch();

double holder() {
  Net net;
  torch::NoGradGuard no_grad;
  double sum = 0;
  for (int i = 0; i < 4; ++i)
    // CHECK-FIXES-SAFE: {{^}}  for (int i = 0; i < 4; ++i){{$}}
    // CHECK-FIXES-UNSAFE: {{^}}  net->eval();{{$}}
    // CHECK-FIXES-UNSAFE-NEXT: {{^}}  for (int i = 0; i < 4; ++i){{$}}
    sum += net->forward(batch()).sum().item<double>();
  // CHECK-MESSAGES-SAFE: :[[@LINE-1]]:12: warning: module 'net' is evaluated in training mode
  // CHECK-MESSAGES-UNSAFE: :[[@LINE-2]]:12: warning: module 'net' is evaluated in training mode
  return sum;
}

double module_object() {
  NetImpl net;
  torch::NoGradGuard no_grad;
  double sum = 0;
  while (sum < 100)
    // CHECK-FIXES-UNSAFE: {{^}}  net.eval();{{$}}
    sum += net.forward(batch()).sum().item<double>();
  // CHECK-MESSAGES-SAFE: :[[@LINE-1]]:12: warning: module 'net' is evaluated in training mode
  // CHECK-MESSAGES-UNSAFE: :[[@LINE-2]]:12: warning: module 'net' is evaluated in training mode
  return sum;
}
