// REQUIRES: check-torch-eval-mode-missing
// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-eval-mode-missing %t -- -- %libtorch_flags

// The real layers: Dropout and BatchNorm2d are mode-dependent, Linear and
// Conv2d are not; train()/eval() from torch::nn::Module.

#include <torch/torch.h>

struct CnnImpl : torch::nn::Module {
  CnnImpl()
      : conv(register_module("conv", torch::nn::Conv2d(3, 8, 3))),
        bn(register_module("bn", torch::nn::BatchNorm2d(8))),
        fc(register_module("fc", torch::nn::Linear(8, 2))) {}
  torch::Tensor forward(torch::Tensor x) {
    return fc(torch::relu(bn(conv(x))).mean({2, 3}));
  }
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
  torch::nn::Linear fc;
};
TORCH_MODULE(Cnn);

struct LinearOnlyImpl : torch::nn::Module {
  LinearOnlyImpl() : fc(register_module("fc", torch::nn::Linear(4, 2))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc;
};
TORCH_MODULE(LinearOnly);

double accuracy(Cnn &model, const torch::Tensor &images, const torch::Tensor &labels) {
  torch::NoGradGuard no_grad;
  auto pred = model->forward(images).argmax(1);
  // CHECK-MESSAGES: :[[@LINE-1]]:15: warning: module 'model' is evaluated in training mode
  return pred.eq(labels).to(torch::kFloat).mean().item<double>();
}

int main() {
  Cnn model;
  torch::optim::SGD opt(model->parameters(), 0.01);
  auto images = torch::rand({4, 3, 8, 8});
  auto labels = torch::zeros({4}, torch::kLong);
  for (int epoch = 0; epoch < 2; ++epoch) {
    model->train();
    auto loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
    accuracy(model, images, labels);
  }
  model->eval();
  accuracy(model, images, labels);

  LinearOnly probe;
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 3; ++i)
    probe->forward(torch::rand({2, 4}));
}
