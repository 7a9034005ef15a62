// RUN: %check_torch_tidy %s torch-host-sync-in-loop %t

#include <torch/torch.h>
#include <iostre>
marts
uct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

torch::Tensor next_input();
torch::Tensor next_target();
void log_value(float v);
struct StepLR {
  void step();
};

// --- Positives -------------------------------------------------------------

void classic_loss_item() {
  Net model;
  model->to(torch::kCUDA);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  float total = 0;
  for (int step = 0; step < 1000; ++step) {
    auto output = model->forward(next_input().to(torch::kCUDA));
    auto loss = torch::nn::functional::mse_loss(output, next_target().to(torch::kCUDA));
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    total += loss.item<float>();
    // CHECK-MESSAGES: :[[@LINE-1]]:19: warning: 'loss.item<float>()' synchronises the host with the GPU on every training step; the GPU idles while the host waits; sync under a condition (e.g. every N steps) or accumulate on the device [torch-host-sync-in-loop]
    // CHECK-MESSAGES: :[[@LINE-4]]:10: note: inside this training loop, which calls 'backward()'
  }
}

void print_cuda_loss() {
  Net model;
  model->to(torch::kCUDA);
  torch::optim::Adam optimizer(model->parameters());
  for (int step = 0; step < 1000; ++step) {
    auto loss = model->forward(next_input().cuda()).sum();
    loss.backward();
    optimizer.step();
    std::cout << "loss " << loss << "\n";
    // CHECK-MESSAGES: :[[@LINE-1]]:26: warning: printing 'loss' copies it to the host and synchronises with the GPU on every training step; the GPU idles while the host waits; print under a condition (e.g. every N steps) or accumulate on the device
  }
}

void cpu_copy_of_predictions(std::vector<torch::Tensor> &history) {
  auto w = torch::randn({4, 2}, torch::kCUDA);
  torch::optim::SGD optimizer({w}, 0.01);
  for (int step = 0; step < 100; ++step) {
    auto pred = next_input().cuda().matmul(w);
    pred.sum().backward();
    optimizer.step();
    history.push_back(pred.cpu());
    // CHECK-MESSAGES: :[[@LINE-1]]:28: warning: 'pred.cpu()' synchronises the host with the GPU on every training step
  }
}

void to_cpu(std::vector<torch::Tensor> &history) {
  auto w = torch::randn({4, 2}, torch::kCUDA);
  torch::optim::SGD optimizer({w}, 0.01);
  for (int step = 0; step < 100; ++step) {
    auto loss = next_input().cuda().matmul(w).mean();
    loss.backward();
    optimizer.step();
    history.push_back(loss.to(torch::kCPU));
    // CHECK-MESSAGES: :[[@LINE-1]]:28: warning: 'loss.to(torch::kCPU)' synchronises the host with the GPU on every training step
  }
}

void synchronize_every_step(Net &model, torch::optim::Optimizer &optimizer) {
  for (int step = 0; step < 100; ++step) {
    model->forward(next_input()).sum().backward();
    optimizer.step();
    torch::cuda::synchronize();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'torch::cuda::synchronize()' blocks the host until the GPU is idle on every training step; the GPU idles while the host launches the next kernels; synchronise under a condition (e.g. every N steps) or not at all
    // CHECK-MESSAGES: :[[@LINE-4]]:40: note: inside this training loop, which calls 'backward()'
  }
}

void symbolic_device(bool use_gpu) {
  torch::Device device(use_gpu ? torch::kCUDA : torch::kCPU);
  Net model;
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int step = 0; step < 100; ++step) {
    auto loss = torch::nn::functional::mse_loss(model->forward(next_input().to(device)),
                                                next_target().to(device));
    loss.backward();
    optimizer.step();
    log_value(loss.item<float>());
    // CHECK-MESSAGES: :[[@LINE-1]]:20: warning: 'loss.item<float>()' synchronises the host with the GPU on every training step where 'device' is CUDA; the GPU idles
  }
}

void data_loade