// PPO split over files: util.cpp places modules and computes statistics,
// rollout.cpp collects experience, update.cpp runs the clipped update,
// main.cpp wires them together.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

constexpr int64_t kObs = 8;
constexpr int64_t kActions = 4;

struct PolicyImpl : torch::nn::Module {
  PolicyImpl()
      : body(register_module("body", torch::nn::Linear(kObs, 64))),
        logits(register_module("logits", torch::nn::Linear(64, kActions))) {}
  torch::Tensor forward(torch::Tensor obs) { return torch::log_softmax(logits(torch::tanh(body(obs))), -1); }
  torch::nn::Linear body, logits;
};
TORCH_MODULE(Policy);

struct Batch {
  torch::Tensor obs;        // [N, kObs], on the policy's device
  torch::Tensor actions;    // [N]
  torch::Tensor old_logp;   // [N]
  torch::Tensor advantage;  // [N]
};

struct UpdateStats {
  torch::Tensor policy_loss;
  int64_t epochs = 0;
};

// util.cpp
torch::Device pick_device();
void place(torch::nn::Module &module, torch::Device device);

// rollout.cpp
Batch collect(Policy &policy, torch::Device device, int64_t steps);

// util.cpp
bool kl_exceeded(const torch::Tensor &old_logp, const torch::Tensor &new_logp, double target);

// update.cpp
void ppo_update(Policy &policy, torch::optim::Optimizer &opt, const Batch &batch, UpdateStats &stats);
