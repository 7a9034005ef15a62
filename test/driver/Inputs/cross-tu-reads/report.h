#pragma once
#include <torch/torch.h>
#include <vector>

struct NetImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Net);

torch::Tensor normalise(const torch::Tensor &t);
double score(Net &net, const std::vector<torch::Tensor> &batches);

// Inline: every TU that calls it defines it, and analyses its own calls.
inline torch::Tensor halve(const torch::Tensor &t) { return t / 2; }
