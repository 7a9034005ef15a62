// REQUIRES: check-torch-grad-accumulation-unscaled
// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-grad-accumulation-unscaled %t -- -- %libtorch_flags

// The real reductions: the loss modules' options (reduction_t, a variant of
// torch::kMean / kSum), the functional losses' options, at::Reduction.

#include <torch/torch.h>

struct MlpImpl : torch::nn::Module {
  MlpImpl() : fc(register_module("fc", torch::nn::Linear(8, 4))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Mlp);

void module_mean(Mlp &model, torch::optim::SGD &opt, const torch::Tensor &x,
                 const torch::Tensor &y, int accum) {
  torch::nn::CrossEntropyLoss criterion;
  for (int i = 0; i < 64; ++i) {
    auto loss = criterion(model->forward(x), y);
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a mean loss
    if ((i + 1) % accum == 0) {
      opt.step();
      // CHECK-MESSAGES: :[[@LINE-1]]:11: note: the step() runs only on some iterations
      opt.zero_grad();
    }
  }
}

void module_sum(Mlp &model, torch::optim::SGD &opt, const torch::Tensor &x,
                const torch::Tensor &y, int accum) {
  torch::nn::CrossEntropyLoss criterion(
      torch::nn::CrossEntropyLossOptions().reduction(torch::kSum));
  for (int i = 0; i < 64; ++i) {
    criterion(model->forward(x), y).backward();
    if ((i + 1) % accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}

void functional_mean(Mlp &model, torch::optim::SGD &opt, const torch::Tensor &x,
                     const torch::Tensor &y) {
  namespace F = torch::nn::functional;
  for (int i = 0; i < 64; ++i) {
    F::cross_entropy(model->forward(x), y,
                     F::CrossEntropyFuncOptions().ignore_index(-1))
        .backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a mean loss
    if (i % 4 == 3) {
      opt.step();
      opt.zero_grad();
    }
  }
}

void at_sum(Mlp &model, torch::optim::SGD &opt, const torch::Tensor &x) {
  for (int i = 0; i < 64; ++i) {
    torch::mse_loss(model->forward(x), torch::zeros({16, 4}), at::Reduction::Sum)
        .backward();
    if (i % 4 == 3) {
      opt.step();
      opt.zero_grad();
    }
  }
}

void scaled(Mlp &model, torch::optim::SGD &opt, const torch::Tensor &x, int accum) {
  for (int i = 0; i < 64; ++i) {
    auto loss = torch::mse_loss(model->forward(x), torch::zeros({16, 4}));
    (loss / accum).backward();
    if ((i + 1) % accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}

int main() {
  Mlp model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto x = torch::randn({16, 8});
  auto y = torch::randint(0, 4, {16}, torch::kLong);
  module_mean(model, opt, x, y, 4);
  module_sum(model, opt, x, y, 4);
  functional_mean(model, opt, x, y);
  at_sum(model, opt, x);
  scaled(model, opt, x, 4);
}
