// REQUIRES: check-torch-inference-without-no-grad
// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-inference-without-no-grad %t -- -- %libtorch_flags

#include <torch/torch.h>
#include <iostream>

struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

torch::Tensor next_input();

double evaluate(Net &model) {
  model->eval();
  double sum = 0;
  for (int i = 0; i < 100; ++i) {
    auto out = model->forward(next_input());
    // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard; autograd records the graph and keeps every activation for a backward that never comes (evaluation or validation loop?) [torch-inference-without-no-grad]
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop runs no backward() or optimizer step
    sum += out.sum().item<double>();
  }
  return sum;
}

double evaluate_sequential(torch::nn::Sequential &seq) {
  double sum = 0;
  for (int i = 0; i < 100; ++i)
    sum += seq->forward(next_input()).sum().item<double>();
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: module forward in a loop that never calls backward()
  // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop
  return sum;
}

double evaluate_guarded(Net &model) {
  torch::NoGradGuard no_grad;
  double sum = 0;
  for (int i = 0; i < 100; ++i)
    sum += model(next_input()).sum().item<double>();
  return sum;
}

double evaluate_inference_mode(Net &model) {
  c10::InferenceMode guard;
  double sum = 0;
  for (int i = 0; i < 100; ++i)
    sum += model(next_input()).sum().item<double>();
  return sum;
}

void train(Net &model) {
  torch::optim::Adam optimizer(model->parameters());
  for (int i = 0; i < 100; ++i) {
    optimizer.zero_grad();
    auto loss = model->forward(next_input()).sum();
    loss.backward();
    optimizer.step();
  }
  std::cout << evaluate(model) << evaluate_guarded(model)
            << evaluate_inference_mode(model) << '\n';
}

void grad_penalty(Net &model) {
  for (int i = 0; i < 10; ++i) {
    auto x = next_input().requires_grad_(true);
    auto y = model(x).sum();
    auto g = torch::autograd::grad({y}, {x});
    std::cout << g[0].sum().item<double>() << '\n';
  }
}

// Across calls, on the real headers: an evaluation loop that is a template
// over the loader type warns; one whose every caller disables autograd
// does not.
template <typename DataLoader>
double evaluate_loader(Net &model, DataLoader &loader) {
  double correct = 0;
  for (const auto &batch : loader) {
    auto output = model->forward(batch.data);
    // CHECK-MESSAGES: :[[@LINE-1]]:19: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop runs no backward() or optimizer step
    correct += output.argmax(1).eq(batch.target).sum().template item<double>();
  }
  return correct;
}

double score_batches(Net &model, const std::vector<torch::Tensor> &batches) {
  double sum = 0;
  for (const auto &x : batches)
    sum += model->forward(x).sum().item<double>();
  return sum;
}

void validate_mnist(Net &model, const std::vector<torch::Tensor> &held_out) {
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      torch::data::datasets::MNIST("./data").map(torch::data::transforms::Stack<>()),
      64);
  std::cout << evaluate_loader(model, *loader) << '\n';
  torch::NoGradGuard no_grad;
  std::cout << score_batches(model, held_out) << '\n';
}
