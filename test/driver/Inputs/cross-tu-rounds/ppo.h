#pragma once
#include <torch/torch.h>
struct PolicyImpl : torch::nn::Module {
  PolicyImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc->forward(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Policy);
struct Batch { torch::Tensor obs, old_logp; };
bool kl_exceeded(const torch::Tensor &old_logp, const torch::Tensor &new_logp);
void place(torch::nn::Module &module, torch::Device device);
void update(Policy &policy, torch::optim::Optimizer &opt, const Batch &batch);
void report(const Batch &batch);
