// RUN: %check_torch_tidy %s torch-host-sync-in-loop %t

#include <torch/torch.h>
#include <iostream>

struct NetImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x) { return x * 2; }
};
TORCH_MODULE(Net);

void log_value(double v);

// --- Template training loops ----------------------------------------------------

template <typename DataLoader>
void train(Net &model, DataLoader &loader, torch::optim::Optimizer &optimizer,
           torch::Device device) {
  for (auto &batch : loader) {
    auto data = batch.data.to(device);
    auto target = batch.target.to(device);
    optimizer.zero_grad();
    auto loss = torch::nn::functional::nll_loss(model->forward(data), target);
    loss.backward();
    optimizer.step();
    log_value(loss.template item<double>());
    // CHECK-MESSAGES: :[[@LINE-1]]:29: warning: 'loss.template item<double>()' synchronises the host with the GPU on every training step where 'device' is CUDA
    // CHECK-MESSAGES: :[[@LINE-4]]:10: note: inside this training loop, which calls 'backward()'
  }
}

void run(Net &model, torch::optim::SGD &optimizer, torch::Device device) {
  auto a = torch::data::make_data_loader(
      torch::data::datasets::MNIST("a").map(torch::data::transforms::Stack<>()),
      64);
  auto b = torch::data::make_data_loader(
      torch::data::datasets::MNIST("b").map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions(8));
  train(model, *a, optimizer, device);
  train(model, *b, optimizer, device);
}

// --- Member functions and class state -------------------------------------------

class Trainer {
public:
  Trainer(Net model, torch::optim::SGD &optimizer)
      : model_(model), optimizer_(optimizer), device_(torch::kCUDA) {
    model_->to(device_);
  }
  void fit(int steps) {
    for (int step = 0; step < steps; ++step) {
      auto x = torch::randn({8, 4}).to(device_);
      auto loss = model_->forward(x).sum();
      optimizer_.zero_grad();
      loss.backward();
      optimizer_.step();
      std::cout << loss << std::endl;
      // CHECK-MESSAGES: :[[@LINE-1]]:17: warning: printing 'loss' copies it to the host and synchronises with the GPU on every training step
    }
  }

private:
  Net model_;
  torch::optim::SGD &optimizer_;
  torch::Device device_;
};

// A training step in a helper makes the loop a training loop.
torch::Tensor train_step(Net &model, torch::optim::SGD &opt,
                         const torch::Tensor &x) {
  opt.zero_grad();
  auto loss = model->forward(x).sum();
  loss.backward();
  opt.step();
  return loss;
}

void loop_around_a_step_helper(Net &model, torch::optim::SGD &opt) {
  model->to(torch::kCUDA);
  for (int i = 0; i < 100; ++i) {
    auto loss = train_step(model, opt, torch::randn({2, 4}, torch::kCUDA));
    log_value(loss.item<double>());
    // CHECK-MESSAGES: :[[@LINE-1]]:20: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step
    // CHECK-MESSAGES: :[[@LINE-3]]:17: note: inside this training loop, which calls 'train_step()'
  }
}

// --- Negatives -------------------------------------------------------------------

void logging_every_n_steps(Net &model, torch::optim::SGD &opt) {
  model->to(torch::kCUDA);
  for (int i = 0; i < 100; ++i) {
    auto loss = train_step(model, opt, torch::randn({2, 4}, torch::kCUDA));
    if (i % 10 == 0)
      log_value(loss.item<double>());
  }
}

double evaluate_on_cpu(Net &model, torch::optim::SGD &opt) {
  double total = 0;
  for (int i = 0; i < 100; ++i) {
    auto loss = train_step(model, opt, torch::randn({2, 4}));
    total += loss.item<double>();
  }
  return total;
}

// A function with its own training loop is a whole training run: the sweep
// that calls it is no training loop, and the score read after the inner
// loop runs once per trial.
double run_trial(double lr, torch::Device device) {
  Net net;
  net->to(device);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(lr));
  for (int step = 0; step < 100; ++step) {
    auto x = torch::ones({8, 4}, device);
    auto loss = torch::mse_loss(net->forward(x), x);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  torch::NoGradGuard no_grad;
  auto x = torch::ones({8, 4}, device);
  return torch::mse_loss(net->forward(x), x).item<double>();
}

void hyperparameter_sweep(torch::Device device) {
  for (double lr : {0.1, 0.01, 0.001})
    std::cout << run_trial(lr, device) << '\n';
}
