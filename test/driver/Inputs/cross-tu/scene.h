#pragma once
#include <torch/torch.h>
#include <vector>

struct NetImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Net);

torch::Tensor make_background();
torch::Tensor upload(const torch::Tensor &t, torch::Device device);
torch::Tensor cuda_ones();
double evaluate(Net &net, const std::vector<torch::Tensor> &batches);
