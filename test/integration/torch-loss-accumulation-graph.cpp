// REQUIRES: check-torch-loss-accumulation-graph
// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-loss-accumulation-graph %t -- -- %libtorch_flags

#include <torch/torch.h>
#include <iostream>
#include <vector>

struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

torch::Tensor next_input();
torch::Tensor next_target();

void train() {
  Net model;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  torch::Tensor total = torch::zeros({});
  std::vector<torch::Tensor> history;
  double running = 0;
  for (int step = 0; step < 1000; ++step) {
    auto output = model->forward(next_input());
    auto loss = torch::nn::functional::mse_loss(output, next_target());
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    total += loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into 'total', declared outside the loop; every iteration's graph stays alive and memory grows with each step [torch-loss-accumulation-graph]
    // CHECK-FIXES: {{^}}    total += loss.detach();{{$}}
    history.push_back(output);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'output' is still attached to its autograd graph and is appended to 'history', declared outside the loop
    // CHECK-FIXES: {{^}}    history.push_back(output.detach());{{$}}
    total = total + loss * 2;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss * 2' is still attached to its autograd graph and is accumulated into 'total', declared outside the loop
    // CHECK-FIXES: {{^}}    total = total + (loss * 2).detach();{{$}}
    running += loss.item<double>();
  }
  std::cout << total.item<double>() << ' ' << running << ' ' << history.size() << '\n';
}

void validate() {
  Net model;
  torch::NoGradGuard no_grad;
  torch::Tensor total = torch::zeros({});
  for (int step = 0; step < 100; ++step)
    total += torch::nn::functional::mse_loss(model(next_input()), next_target());
  std::cout << total.item<double>() << '\n';
}

void accumulate_then_backward() {
  Net model;
  torch::Tensor total = torch::zeros({});
  for (int micro = 0; micro < 4; ++micro)
    total = total + model->forward(next_input()).sum();
  total.backward();
}

// Across calls, on the real headers: the MNIST loop is a template over the
// loader type; a Trainer keeps its running loss in a member.
template <typename DataLoader>
void train_epoch(Net &model, DataLoader &loader,
                 torch::optim::Optimizer &optimizer) {
  torch::Tensor epoch_loss = torch::zeros({1});
  double reported = 0;
  for (auto &batch : loader) {
    optimizer.zero_grad();
    auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
    loss.backward();
    optimizer.step();
    epoch_loss += loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into 'epoch_loss', declared outside the loop
    // CHECK-MESSAGES: :[[@LINE-5]]:17: note: 'loss' joins the autograd graph here
    reported += loss.template item<double>();
  }
}

class Trainer {
public:
  void fit_epoch(const std::vector<torch::Tensor> &inputs) {
    for (const auto &input : inputs) {
      auto loss = model_->forward(input).sum();
      loss.backward();
      running_loss_ += loss;
      // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: 'loss' is still attached to its autograd graph and is accumulated into member 'running_loss_'
      // CHECK-MESSAGES: :[[@LINE-4]]:27: note: 'loss' joins the autograd graph here
      detached_loss_ += loss.detach();
    }
  }

private:
  Net model_;
  torch::Tensor running_loss_ = torch::zeros({1});
  torch::Tensor detached_loss_ = torch::zeros({1});
};

void train_mnist() {
  Net model;
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      torch::data::datasets::MNIST("./data").map(torch::data::transforms::Stack<>()),
      64);
  torch::optim::SGD optimizer(model->parameters(), 0.01);
  train_epoch(model, *loader, optimizer);
}
