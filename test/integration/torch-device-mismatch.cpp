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

// Across calls, on the real headers: a Trainer whose model and device are
// members, set in the constructor; a helper that combines its arguments.
class Trainer {
public:
  explicit Trainer(torch::Device device) : device_(device) {
    model_->to(device_);
  }
  void fit_epoch(const std::vector<torch::Tensor> &targets) {
    for (const auto &target : targets) {
      auto input = torch::randn({8, 4});
      auto loss = torch::mse_loss(model_->forward(input), target);
      // CHECK-MESSAGES: :[[@LINE-1]]:43: warning: module 'model_' has its parameters on 'device_' but is called with 'input' on CPU; this crashes on a machine where 'device_' is CUDA [torch-device-mismatch]
      // CHECK-MESSAGES: :[[@LINE-7]]:13: note: 'model_' is on 'device_' from here
      // CHECK-MESSAGES: :[[@LINE-4]]:20: note: 'input' is on CPU from here
      loss.backward();
      auto moved = torch::mse_loss(model_->forward(input.to(device_)), target);
      (void)moved;
    }
  }

private:
  torch::Device device_;
  Net model_;
};

torch::Tensor render(Net &model, const torch::Tensor &x,
                     const torch::Tensor &background) {
  return model->forward(x) + background;
}

void render_on(torch::Device device) {
  Net model;
  model->to(device);
  auto x = torch::randn({8, 4}).to(device);
  auto background = torch::zeros({8, 2});
  auto image = render(model, x, background);
  // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: 'render()' combines 'model' on 'device' with 'background' on CPU in operator '+'; this crashes on a machine where 'device' is CUDA [torch-device-mismatch]
  // CHECK-MESSAGES: :[[@LINE-5]]:10: note: 'model' is on 'device' from here
  // CHECK-MESSAGES: :[[@LINE-4]]:21: note: 'background' is on CPU from here
  // CHECK-MESSAGES: :[[@LINE-12]]:28: note: operator '+' combines them here
  auto fine = render(model, x, background.to(device));
  (void)image;
  (void)fine;
}

// Near-miss on the real headers, where Tensor::device() is declared on
// at::TensorBase: the device of a tensor parameter is what the callers pass
// (the CPU here), not a device variable that may hold CUDA.
torch::Tensor decode_like(Net &model, const torch::Tensor &src) {
  auto device = src.device();
  return model->forward(torch::zeros({1, 4}).to(device));
}
void decode_on_host() {
  Net model;
  model->to(torch::kCPU);
  decode_like(model, torch::randint(0, 10, {1, 4}).to(torch::kFloat));
}
