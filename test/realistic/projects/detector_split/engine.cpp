// The detector network and the runtime helpers the training code leans on.
#include "detector.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <chrono>
#include <iostream>

DetectorImpl::DetectorImpl() {
  backbone = register_module(
      "backbone",
      torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).stride(2).padding(1)),
                            torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)),
                            torch::nn::BatchNorm2d(64), torch::nn::ReLU(),
                            torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions(1))));
  drop = register_module("drop", torch::nn::Dropout(0.2));
  head = register_module("head", torch::nn::Linear(64, kClasses + 4));
}

torch::Tensor DetectorImpl::forward(torch::Tensor images) {
  auto features = backbone->forward(images).flatten(1);
  return head(drop(features));
}

torch::Device pick_device() {
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

// cuDNN autotuning plus one throw-away convolution so that the first training
// step does not pay for the kernel search.
void enable_fast_kernels() {
  at::globalContext().setBenchmarkCuDNN(true);
  // OK(torch-cuda-unguarded): main.cpp calls this only under
  // torch::cuda::is_available().
  auto probe = torch::randn({8, 3, kImage, kImage}, torch::kCUDA);
  auto weight = torch::randn({32, 3, 3, 3}, torch::kCUDA);
  std::cout << "warm-up " << torch::conv2d(probe, weight).sum().item<float>() << '\n';
}

// Throughput figure printed in the run summary.
double gpu_matmul_tflops() {
  // BUG(torch-cuda-unguarded): main.cpp calls this after training on every
  // machine, outside its is_available() check.
  auto a = torch::randn({2048, 2048}, torch::Device(torch::kCUDA));
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i)
    a = torch::mm(a, a).div_(2048);
  torch::cuda::synchronize();
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  return 10 * 2.0 * 2048.0 * 2048.0 * 2048.0 / took.count() / 1e12;
}

void clear_grads(torch::optim::Optimizer &opt) { opt.zero_grad(); }

void compact_allocator() {
  // BUG(torch-empty-cache-in-loop): train_detector() (train.cpp) calls this
  // at the end of every epoch.
  c10::cuda::CUDACachingAllocator::emptyCache();
}

void freeze(Detector &det) {
  det->eval();
  for (auto &p : det->parameters())
    p.set_requires_grad(false);
}

torch::Tensor run_detector(Detector &det, const torch::Tensor &images) {
  // OK(torch-eval-mode-missing, torch-inference-without-no-grad): its only
  // caller, predict_tiles(), runs after freeze() under main.cpp's NoGradGuard.
  return det->forward(images);
}

void LossMeter::update(const torch::Tensor &loss) {
  // BUG(torch-host-sync-in-loop): train_detector() (train.cpp) calls this on
  // every step with the loss on the training device.
  sum_ += loss.item<double>();
  ++count_;
}

void EpochLog::record(const torch::Tensor &loss) {
  // BUG(torch-loss-accumulation-graph): train_detector() hands over each
  // step's loss with its graph; losses_ outlives the whole run.
  losses_.push_back(loss);
}

std::vector<double> EpochLog::curve() const {
  std::vector<double> out;
  out.reserve(losses_.size());
  for (const auto &l : losses_)
    out.push_back(l.item<double>());
  return out;
}
