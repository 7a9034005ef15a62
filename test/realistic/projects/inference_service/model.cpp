#include "model.h"

#include <c10/cuda/CUDACachingAllocator.h>

EmbedderImpl::EmbedderImpl()
    : fc1(register_module("fc1", torch::nn::Linear(kInputDim, 256))),
      fc2(register_module("fc2", torch::nn::Linear(256, kEmbedDim))) {}

torch::Tensor EmbedderImpl::forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }

Embedder load_embedder(torch::Device device) {
  Embedder model;
  model->to(device);
  model->eval();
  return model;
}

torch::Tensor embed(Embedder &model, const torch::Tensor &x) { return model->forward(x); }

// Starts the copy to the host and returns at once.
torch::Tensor download(const torch::Tensor &device_tensor) {
  return device_tensor.to(torch::kCPU, /*non_blocking=*/true);
}

void release_memory() {
  // BUG(torch-empty-cache-in-loop): Service::serve() (server.cpp) calls this
  // after every batch it answers.
  c10::cuda::CUDACachingAllocator::emptyCache();
}

torch::Device replica_device() {
  // OK(torch-device-index-unchecked, torch-cuda-unguarded): main.cpp calls
  // this only after checking torch::cuda::device_count() >= 2.
  return torch::Device(torch::kCUDA, 1);
}
