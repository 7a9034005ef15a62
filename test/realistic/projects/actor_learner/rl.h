// An actor-learner split of a small policy-gradient agent on a toy grid
// world: actor.cpp steps the environment with a CPU copy of the policy,
// learner.cpp owns the GPU copy and its optimizer, main.cpp alternates the
// two and publishes the learner's weights to the actor.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

constexpr int64_t kGrid = 6;
constexpr int64_t kObs = 2 * kGrid;
constexpr int64_t kActions = 4;

struct PolicyImpl : torch::nn::Module {
  PolicyImpl()
      : trunk(register_module("trunk", torch::nn::Linear(kObs, 64))),
        pi(register_module("pi", torch::nn::Linear(64, kActions))),
        v(register_module("v", torch::nn::Linear(64, 1))) {}
  torch::Tensor forward(torch::Tensor obs) { return pi(torch::tanh(trunk(obs))); }
  torch::Tensor value(torch::Tensor obs) { return v(torch::tanh(trunk(obs))).squeeze(1); }
  torch::nn::Linear trunk, pi, v;
};
TORCH_MODULE(Policy);

// A batch of transitions, stored on the host.
struct Rollout {
  torch::Tensor obs;      // [T, kObs] float
  torch::Tensor actions;  // [T] long
  torch::Tensor returns;  // [T] float, discounted
  double mean_episode_return = 0;
};

// The grid world: reach the goal corner; -0.01 per step, +1 at the goal.
class GridWorld {
 public:
  explicit GridWorld(uint64_t seed) : rng_(seed) { reset(); }
  torch::Tensor reset();
  // Returns the reward; sets 'done'.
  double step(int64_t action, bool &done);
  torch::Tensor observe() const;

 private:
  std::mt19937_64 rng_;
  int64_t x_ = 0, y_ = 0, t_ = 0;
};

// actor.cpp
Rollout collect(Policy &policy, GridWorld &env, int64_t steps, double gamma);
double evaluate(Policy &policy, GridWorld &env, int64_t episodes);

// learner.cpp
class Learner {
 public:
  explicit Learner(int64_t epochs);
  void update(const Rollout &rollout);
  void publish(Policy &actor_policy);
  double recent_loss(size_t window) const;
  double explained_variance(const Rollout &rollout);
  void save(const std::string &path);

 private:
  torch::Device device_;
  int64_t epochs_;
  Policy policy_;
  torch::optim::Adam opt_;
  std::vector<torch::Tensor> loss_history_;
};
