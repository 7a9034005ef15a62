// The actor: steps the grid world with its CPU copy of the policy.
#include "rl.h"

#include <algorithm>

torch::Tensor GridWorld::reset() {
  std::uniform_int_distribution<int64_t> cell(0, kGrid - 2);
  x_ = cell(rng_);
  y_ = cell(rng_);
  t_ = 0;
  return observe();
}

double GridWorld::step(int64_t action, bool &done) {
  static const int64_t dx[kActions] = {1, -1, 0, 0};
  static const int64_t dy[kActions] = {0, 0, 1, -1};
  x_ = std::clamp<int64_t>(x_ + dx[action], 0, kGrid - 1);
  y_ = std::clamp<int64_t>(y_ + dy[action], 0, kGrid - 1);
  ++t_;
  const bool goal = x_ == kGrid - 1 && y_ == kGrid - 1;
  done = goal || t_ >= 4 * kGrid;
  return goal ? 1.0 : -0.01;
}

torch::Tensor GridWorld::observe() const {
  auto obs = torch::zeros({kObs});
  obs[x_] = 1.0;
  obs[kGrid + y_] = 1.0;
  return obs;
}

Rollout collect(Policy &policy, GridWorld &env, int64_t steps, double gamma) {
  std::vector<torch::Tensor> observations;
  std::vector<int64_t> actions;
  std::vector<double> rewards;
  std::vector<bool> dones;
  auto obs = env.reset();
  double episode_return = 0, return_sum = 0;
  int64_t episodes = 0;
  for (int64_t t = 0; t < steps; ++t) {
    // BUG(torch-inference-without-no-grad): main.cpp calls collect() with
    // autograd on, and acting never runs a backward pass.
    auto logits = policy->forward(obs.unsqueeze(0));
    const int64_t a = torch::multinomial(torch::softmax(logits, 1), 1).item<int64_t>();
    bool done = false;
    const double r = env.step(a, done);
    observations.push_back(obs);
    actions.push_back(a);
    rewards.push_back(r);
    dones.push_back(done);
    episode_return += r;
    if (done) {
      return_sum += episode_return;
      episode_return = 0;
      ++episodes;
      obs = env.reset();
    } else {
      obs = env.observe();
    }
  }
  std::vector<float> returns(rewards.size());
  double g = 0;
  for (size_t i = rewards.size(); i-- > 0;) {
    g = rewards[i] + (dones[i] ? 0.0 : gamma * g);
    returns[i] = static_cast<float>(g);
  }
  Rollout out;
  out.obs = torch::stack(observations);
  out.actions = torch::tensor(actions, torch::kLong);
  out.returns = torch::tensor(returns);
  out.mean_episode_return = episodes == 0 ? 0.0 : return_sum / static_cast<double>(episodes);
  return out;
}

// Greedy evaluation episodes.
double evaluate(Policy &policy, GridWorld &env, int64_t episodes) {
  double total = 0;
  for (int64_t e = 0; e < episodes; ++e) {
    auto obs = env.reset();
    bool done = false;
    while (!done) {
      // OK(torch-inference-without-no-grad): main.cpp calls evaluate() only
      // under a NoGradGuard.
      const int64_t a = policy->forward(obs.unsqueeze(0)).argmax(1).item<int64_t>();
      total += env.step(a, done);
      obs = env.observe();
    }
  }
  return total / static_cast<double>(episodes);
}
