// REQUIRES: check-torch-missing-zero-grad
// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-missing-zero-grad %t -- -- %libtorch_flags

// The real optimizers (torch::optim::Adam derives from Optimizer) and the
// real resets: Optimizer::zero_grad, Module::zero_grad, mutable_grad().

#include <torch/torch.h>

struct MlpImpl : torch::nn::Module {
  MlpImpl() : fc(register_module("fc", torch::nn::Linear(8, 2))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Mlp);

void never_reset(Mlp &model, torch::optim::Adam &opt, const torch::Tensor &x,
                 const torch::Tensor &y) {
  for (int epoch = 0; epoch < 10; ++epoch) {
    auto loss = torch::mse_loss(model->forward(x), y);
    loss.backward();
    opt.step();
    // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: optimizer step() with no gradient reset
    // CHECK-MESSAGES: :[[@LINE-3]]:10: note: the next backward() adds
  }
}

void module_reset(Mlp &model, torch::optim::Adam &opt, const torch::Tensor &x,
                  const torch::Tensor &y) {
  for (int epoch = 0; epoch < 10; ++epoch) {
    model->zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    opt.step();
  }
}

void manual_reset(Mlp &model, torch::optim::SGD &opt, const torch::Tensor &x) {
  for (int epoch = 0; epoch < 10; ++epoch) {
    model->forward(x).sum().backward();
    opt.step();
    for (auto &p : model->parameters())
      p.mutable_grad().reset();
  }
}

int main() {
  Mlp model;
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
  torch::optim::SGD sgd(model->parameters(), 0.1);
  auto x = torch::randn({16, 8});
  auto y = torch::randn({16, 2});
  never_reset(model, adam, x, y);
  module_reset(model, adam, x, y);
  manual_reset(model, sgd, x);
}
