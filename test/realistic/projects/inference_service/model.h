// The model side of the inference service: loading, a host download helper,
// memory management, and the replica device.
#pragma once

#include <torch/torch.h>

#include <cstdint>

struct EmbedderImpl : torch::nn::Module {
  EmbedderImpl();
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Embedder);

constexpr int64_t kInputDim = 128;
constexpr int64_t kEmbedDim = 64;

Embedder load_embedder(torch::Device device);
torch::Tensor embed(Embedder &model, const torch::Tensor &x);
torch::Tensor download(const torch::Tensor &device_tensor);
void release_memory();
torch::Device replica_device();
