// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-device-mismatch %t -- -- %libtorch_flags

#include <torch/torch.h>

struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

void module_on_cuda(bool gpu) {
  torch::Device device(gpu ? torch::kCUDA : torch::kCPU);
  Net net;
  net->to(device);
  auto x = torch::randn({8, 4});
  auto y = net->forward(x);
  // CHECK-MESSAGES: :[[@LINE-1]]:17: warning: module 'net' has its parameters on 'device' but is called with 'x' on CPU; this crashes on a machine where 'device' is CUDA [torch-device-mismatch]
  auto ok = net->forward(x.to(device));
}

void operators_and_functions() {
  auto a = torch::randn({4, 4}, torch::TensorOptions().device(torch::kCUDA, 0));
  auto b = torch::ones({4, 4}).to(torch::Device("cuda:1"));
  auto c = torch::zeros({4, 4});
  a + b;
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: operator '+' combines 'a' on cuda:0 with 'b' on cuda:1
  torch::cat({a, c});
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: 'at::cat' combines 'a' on cuda:0 with 'c' on CPU
  torch::nn::functional::mse_loss(a, c);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: 'torch::nn::functional::mse_loss' combines 'a' on cuda:0 with 'c' on CPU
  a * torch::tensor(2.0);
  auto d = c.to(torch::kCUDA, /*non_blocking=*/true);
  d + a.to(d);
}

void loader() {
  Net net;
  net->to(torch::kCUDA);
  auto loader = torch::data::make_data_loader(
      torch::data::datasets::MNIST("data").map(torch::data::transforms::Stack<>()), 64);
  for (auto &batch : *loader) {
    net(batch.data);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: module 'net' has its parameters on CUDA but is called with 'batch.data' on CPU
    net(batch.data.to(torch::kCUDA));
  }
}
