// REQUIRES: libtorch
// RUN: %check_torch_tidy %s torch-host-sync-in-loop %t -- -- %libtorch_flags

#include <torch/torch.h>
#include <iostream>

struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

torch::Tensor next_input();
torch::Tensor next_target();

void train(bool gpu) {
  torch::Device device(gpu ? torch::kCUDA : torch::kCPU);
  Net model;
  model->to(torch::kCUDA);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  double running = 0;
  for (int step = 0; step < 1000; ++step) {
    auto output = model->forward(next_input().to(torch::kCUDA));
    auto loss = torch::nn::functional::mse_loss(output, next_target().to(torch::kCUDA));
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    running += loss.item<double>();
    // CHECK-MESSAGES: :[[@LINE-1]]:21: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step; the GPU idles while the host waits; sync under a condition (e.g. every N steps) or accumulate on the device [torch-host-sync-in-loop]
    std::cout << loss << "\n";
    // CHECK-MESSAGES: :[[@LINE-1]]:15: warning: printing 'loss' copies it to the host and synchronises with the GPU on every training step
    auto host = output.cpu();
    // CHECK-MESSAGES: :[[@LINE-1]]:24: warning: 'output.cpu()' synchronises
    torch::cuda::synchronize();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'torch::cuda::synchronize()' blocks the host until the GPU is idle on every training step
    auto on_host = output.to(torch::kCPU);
    // CHECK-MESSAGES: :[[@LINE-1]]:27: warning: 'output.to(torch::kCPU)' synchronises
    auto on_device = output.to(device);
    auto pending = output.to(torch::kCPU, /*non_blocking=*/true);
    if (step % 100 == 0)
      std::cout << "loss " << loss.item<float>() << "\n";
  }
  std::cout << running << "\n";
}

void symbolic_device(bool gpu) {
  torch::Device device(gpu ? torch::kCUDA : torch::kCPU);
  Net model;
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 1000; ++step) {
    auto loss = model->forward(next_input().to(device)).sum();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    std::cout << loss.item<float>() << "\n";
    // CHECK-MESSAGES: :[[@LINE-1]]:23: warning: 'loss.item<float>()' synchronises the host with the GPU on every training step where 'device' is CUDA
  }
}

void accumulate_on_device() {
  Net model;
  model->to(torch::kCUDA);
  torch::optim::Adam optimizer(model->parameters());
  for (int epoch = 0; epoch < 10; ++epoch) {
    auto epoch_loss = torch::zeros({}, torch::kCUDA);
    for (int step = 0; step < 100; ++step) {
      auto loss = model->forward(next_input().cuda()).sum();
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      epoch_loss += loss.detach();
    }
    std::cout << epoch_loss.item<float>() << "\n";
  }
}

void cpu_training() {
  Net model;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 100; ++step) {
    auto loss = model->forward(next_input()).sum();
    loss.backward();
    optimizer.step();
    std::cout << loss.item<float>() << "\n";
  }
}

// Across calls, on the real headers: the MNIST loop is a template over the
// loader type, and the device comes in as a parameter.
template <typename DataLoader>
void train_epoch(Net &model, torch::Device device, DataLoader &loader,
                 torch::optim::Optimizer &optimizer) {
  for (auto &batch : loader) {
    optimizer.zero_grad();
    auto loss = torch::nll_loss(model->forward(batch.data.to(device)),
                                batch.target.to(device));
    loss.backward();
    optimizer.step();
    std::cout << loss.template item<float>() << '\n';
    // CHECK-MESSAGES: :[[@LINE-1]]:32: warning: 'loss.template item<float>()' synchronises the host with the GPU on every training step where 'device' is CUDA
    // CHECK-MESSAGES: :[[@LINE-4]]:10: note: inside this training loop, which calls 'backward()'
    // CHECK-MESSAGES: :[[@LINE-7]]:17: note: 'loss' is on 'device' from here
  }
}

void train_mnist(torch::Device device) {
  Net model;
  model->to(device);
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      torch::data::datasets::MNIST("./data").map(torch::data::transforms::Stack<>()),
      64);
  torch::optim::SGD optimizer(model->parameters(), 0.01);
  train_epoch(model, device, *loader, optimizer);
}
