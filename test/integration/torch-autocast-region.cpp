// REQUIRES: check-torch-autocast-region
// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-autocast-region %t -- -- %libtorch_flags -Wno-deprecated-declarations

// Both APIs: 1.13's CUDA-only set_enabled / is_enabled /
// set_autocast_gpu_dtype (deprecated inline wrappers in 2.x) and 2.x's
// per-device set_autocast_enabled / is_autocast_enabled /
// set_autocast_dtype, in helpers so that each header set reports the same
// lines.

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <stdexcept>

struct MlpImpl : torch::nn::Module {
  MlpImpl() : fc(register_module("fc", torch::nn::Linear(8, 4))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Mlp);

void amp_on() {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
  at::autocast::set_enabled(true);
#endif
}
void amp_off() {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_enabled(at::kCUDA, false);
#else
  at::autocast::set_enabled(false);
#endif
}
void amp_bfloat16() {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
#else
  at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
#endif
}

torch::Tensor infer(Mlp &model, const torch::Tensor &x) {
  at::autocast::set_enabled(true);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: autocast switched on here stays on when the function throws below
  auto y = model->forward(x);
  if (!y.defined())
    throw std::runtime_error("no output");
  // CHECK-MESSAGES: :[[@LINE-1]]:5: note: the function throws here with autocast on
  at::autocast::set_enabled(false);
  return y;
}

torch::Tensor infer_restored(Mlp &model, const torch::Tensor &x) {
  bool was = at::autocast::is_enabled();
  at::autocast::set_enabled(true);
  auto y = model->forward(x);
  at::autocast::set_enabled(was);
  if (!y.defined())
    throw std::runtime_error("no output");
  return y;
}

void train_fp16(Mlp &model, torch::optim::SGD &opt, const torch::Tensor &x,
                const torch::Tensor &y) {
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    amp_on();
    auto loss = torch::mse_loss(model->forward(x), y);
    amp_off();
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a loss computed in a float16 autocast region
    // CHECK-MESSAGES: :[[@LINE-5]]:5: note: the float16 region that computed the loss starts here
    opt.step();
  }
}

void train_inside(Mlp &model, torch::optim::SGD &opt, const torch::Tensor &x,
                  const torch::Tensor &y) {
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    amp_on();
    auto loss = torch::mse_loss(model->forward(x), y);
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() runs inside an autocast region
    // CHECK-MESSAGES: :[[@LINE-4]]:5: note: autocast is switched on here
    amp_off();
    opt.step();
  }
}

void train_bf16(Mlp &model, torch::optim::SGD &opt, const torch::Tensor &x,
                const torch::Tensor &y) {
  amp_bfloat16();
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    amp_on();
    auto loss = torch::mse_loss(model->forward(x), y);
    amp_off();
    loss.backward();
    opt.step();
  }
}

int main() {
  Mlp model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto x = torch::randn({16, 8});
  auto y = torch::randn({16, 4});
  infer(model, x);
  infer_restored(model, x);
  train_fp16(model, opt, x, y);
  train_inside(model, opt, x, y);
  train_bf16(model, opt, x, y);
}
