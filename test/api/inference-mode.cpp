// RUN: %check_torch_tidy %s torch-inference-without-no-grad %t

// c10::InferenceMode, also spelt torch::InferenceMode and at::InferenceMode
// (LibTorch 1.13 and 2.x): a guard like NoGradGuard when enabled, none with
// `false`.

#include <torch/torch.h>

struct NetImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Net);

torch::Tensor next_input();

double c10_spelling(Net net) {
  c10::InferenceMode guard;
  double sum = 0;
  for (int i = 0; i < 100; ++i)
    sum += net(next_input()).sum().item<double>();
  return sum;
}

double torch_spelling(Net net) {
  torch::InferenceMode guard;
  double sum = 0;
  for (int i = 0; i < 100; ++i)
    sum += net(next_input()).sum().item<double>();
  return sum;
}

double at_spelling_disabled(Net net) {
  at::InferenceMode guard(/*enabled=*/false);
  double sum = 0;
  for (int i = 0; i < 100; ++i) {
    auto y = net(next_input());
    // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop runs no backward() or optimizer step
    sum += y.sum().item<double>();
  }
  return sum;
}
