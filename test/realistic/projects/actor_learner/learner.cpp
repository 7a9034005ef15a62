// The learner: advantage actor-critic updates on the GPU copy of the policy.
#include "rl.h"

#include <numeric>

Learner::Learner(int64_t epochs)
    // BUG(torch-cuda-unguarded): main.cpp constructs the learner without
    // asking torch::cuda::is_available(); there is no CPU path.
    : device_(torch::kCUDA),
      epochs_(epochs),
      policy_(),
      opt_(policy_->parameters(), torch::optim::AdamOptions(3e-4)) {
  policy_->to(device_);
}

void Learner::update(const Rollout &rollout) {
  auto obs = rollout.obs.to(device_);
  auto actions = rollout.actions.to(device_);
  auto returns = rollout.returns.to(device_);
  returns = (returns - returns.mean()) / (returns.std() + 1e-6);
  policy_->train();
  for (int64_t epoch = 0; epoch < epochs_; ++epoch) {
    auto logits = policy_->forward(obs);
    auto log_probs = torch::log_softmax(logits, 1);
    auto logp = log_probs.gather(1, actions.unsqueeze(1)).squeeze(1);
    auto value = policy_->value(obs);
    auto advantage = (returns - value).detach();
    auto entropy = -(log_probs.exp() * log_probs).sum(1).mean();
    auto loss = -(logp * advantage).mean() + 0.5 * (returns - value).pow(2).mean() - 0.01 * entropy;
    opt_.zero_grad();
    loss.backward();
    opt_.step();
    // BUG(torch-loss-accumulation-graph): loss_history_ outlives the update;
    // every stored loss keeps its step's graph alive.
    loss_history_.push_back(loss);
  }
}

// Copies the learner's weights into the actor's CPU policy.
void Learner::publish(Policy &actor_policy) {
  torch::NoGradGuard no_grad;
  auto src = policy_->parameters();
  auto dst = actor_policy->parameters();
  for (size_t i = 0; i < src.size(); ++i)
    dst[i].copy_(src[i]);
}

double Learner::recent_loss(size_t window) const {
  if (loss_history_.empty()) return 0.0;
  const size_t n = std::min(window, loss_history_.size());
  std::vector<torch::Tensor> tail(loss_history_.end() - static_cast<std::ptrdiff_t>(n), loss_history_.end());
  return torch::stack(tail).mean().item<double>();
}

// 1 - Var(returns - V) / Var(returns): how much of the return the critic
// explains. Called by main.cpp's report every few iterations.
double Learner::explained_variance(const Rollout &rollout) {
  torch::NoGradGuard no_grad;
  auto obs = rollout.obs.to(device_);
  auto returns = rollout.returns.to(device_);
  // OK(torch-inference-without-no-grad): one forward, under the guard.
  auto value = policy_->value(obs);
  auto var = returns.var();
  return (1.0 - (returns - value).var() / (var + 1e-8)).item<double>();
}

void Learner::save(const std::string &path) {
  torch::save(policy_, path);
}
