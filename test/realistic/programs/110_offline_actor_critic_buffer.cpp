// Offline actor-critic updates from a buffer of logged rollouts (synthetic
// 16-dimensional states, four discrete actions). The policy takes PPO-style
// clipped steps for a few epochs over minibatches; the value network is
// fitted with gradient accumulation; a small reward model (LayerNorm only)
// accumulates gradients and averages them before each step.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kState = 16;
constexpr int64_t kActions = 4;

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t in, int64_t out, double dropout)
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(in, 64), torch::nn::Tanh(),
                                                         torch::nn::Dropout(dropout), torch::nn::Linear(64, out)))) {}
  torch::Tensor forward(torch::Tensor x) { return net->forward(x); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Mlp);

struct RewardModelImpl : torch::nn::Module {
  RewardModelImpl()
      : net(register_module("net", torch::nn::Sequential(
                                       torch::nn::Linear(kState + kActions, 64),
                                       torch::nn::LayerNorm(torch::nn::LayerNormOptions({64})),
                                       torch::nn::ReLU(), torch::nn::Linear(64, 1)))) {}
  torch::Tensor forward(torch::Tensor states, torch::Tensor actions) {
    auto onehot = torch::one_hot(actions, kActions).to(torch::kFloat);
    return net->forward(torch::cat({states, onehot}, 1)).squeeze(1);
  }
  torch::nn::Sequential net;
};
TORCH_MODULE(RewardModel);

struct RolloutBuffer {
  torch::Tensor states, actions, old_log_probs, advantages, returns, rewards;
  int64_t size() const { return states.size(0); }

  static RolloutBuffer synthetic(int64_t n, torch::Device device) {
    RolloutBuffer b;
    b.states = torch::randn({n, kState}, device);
    b.actions = torch::randint(kActions, {n}, torch::TensorOptions().dtype(torch::kLong).device(device));
    b.old_log_probs = torch::full({n}, std::log(1.0 / kActions), torch::TensorOptions().device(device));
    b.returns = b.states.narrow(1, 0, 4).sum(1) + 0.1 * torch::randn({n}, device);
    b.advantages = (b.returns - b.returns.mean()) / (b.returns.std() + 1e-8);
    b.rewards = b.states.narrow(1, 4, 2).sum(1) * b.actions.eq(0).to(torch::kFloat);
    return b;
  }
};

void fit_policy(Mlp &policy, const RolloutBuffer &buf, int ppo_epochs, int64_t minibatch, double clip) {
  policy->train();
  torch::optim::Adam opt(policy->parameters(), torch::optim::AdamOptions(3e-4));
  for (int e = 0; e < ppo_epochs; ++e) {
    auto perm = torch::randperm(buf.size(), buf.actions.options());
    opt.zero_grad();
    for (int64_t start = 0; start + minibatch <= buf.size(); start += minibatch) {
      auto idx = perm.narrow(0, start, minibatch);
      auto logp = torch::log_softmax(policy->forward(buf.states.index_select(0, idx)), 1)
                      .gather(1, buf.actions.index_select(0, idx).unsqueeze(1))
                      .squeeze(1);
      auto ratio = torch::exp(logp - buf.old_log_probs.index_select(0, idx));
      auto adv = buf.advantages.index_select(0, idx);
      auto loss = -torch::min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean();
      loss.backward();
      // BUG(torch-missing-zero-grad): the reset runs once per PPO epoch, so
      // each minibatch step re-applies all earlier minibatches' gradients.
      opt.step();
    }
  }
}

void fit_value(Mlp &value, const RolloutBuffer &buf, int64_t minibatch, int64_t accum) {
  value->train();
  torch::optim::Adam opt(value->parameters(), torch::optim::AdamOptions(1e-3));
  opt.zero_grad();
  int64_t step = 0;
  for (int64_t start = 0; start + minibatch <= buf.size(); start += minibatch) {
    auto v = value->forward(buf.states.narrow(0, start, minibatch)).squeeze(1);
    auto loss = (v - buf.returns.narrow(0, start, minibatch)).pow(2).mean();
    // BUG(torch-grad-accumulation-unscaled): accum minibatch means add up
    // before each step, so the value network's learning rate is accum times
    // the configured one.
    loss.backward();
    if ((step + 1) % accum == 0) {
      // OK(torch-missing-zero-grad): the reset shares the step's condition.
      opt.step();
      opt.zero_grad();
    }
    ++step;
  }
}

void fit_reward_model(RewardModel &rm, const RolloutBuffer &buf, int64_t minibatch, int64_t accum) {
  auto params = rm->parameters();
  torch::optim::SGD opt(params, torch::optim::SGDOptions(1e-2).momentum(0.9));
  auto reset_grads = [&params] {
    for (auto &p : params)
      p.mutable_grad().reset();
  };
  reset_grads();
  int64_t micro = 0;
  for (int64_t start = 0; start + minibatch <= buf.size(); start += minibatch) {
    auto pred = rm->forward(buf.states.narrow(0, start, minibatch), buf.actions.narrow(0, start, minibatch));
    auto loss = torch::nn::functional::mse_loss(pred, buf.rewards.narrow(0, start, minibatch));
    // OK(torch-grad-accumulation-unscaled): the gradients are averaged before step().
    loss.backward();
    if (++micro % accum == 0) {
      for (auto &p : params)
        p.grad().div_(static_cast<double>(accum));
      // OK(torch-missing-zero-grad): reset_grads() runs under the step's condition.
      opt.step();
      reset_grads();
    }
  }
}

// 1 - Var(returns - V) / Var(returns); the caller switches the network to eval().
double explained_variance(Mlp &value, const RolloutBuffer &buf) {
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): main() calls value->eval() first.
  auto v = value->forward(buf.states).squeeze(1);
  return 1.0 - ((buf.returns - v).var() / buf.returns.var()).item<double>();
}

double greedy_agreement(Mlp &policy, const RolloutBuffer &buf) {
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): main() calls policy->eval() first.
  auto greedy = policy->forward(buf.states).argmax(1);
  return greedy.eq(buf.actions).to(torch::kFloat).mean().item<double>();
}

double reward_model_rmse(RewardModel &rm, const RolloutBuffer &buf) {
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): LayerNorm behaves the same in both modes.
  auto pred = rm->forward(buf.states, buf.actions);
  return std::sqrt((pred - buf.rewards).pow(2).mean().item<double>());
}

int main() {
  torch::manual_seed(23);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Mlp policy(kState, kActions, 0.1), value(kState, 1, 0.1);
  RewardModel reward_model;
  policy->to(device);
  value->to(device);
  reward_model->to(device);

  auto buffer = RolloutBuffer::synthetic(8192, device);
  auto held_out = RolloutBuffer::synthetic(2048, device);
  fit_policy(policy, buffer, 4, 256, 0.2);
  fit_value(value, buffer, 128, 4);
  fit_reward_model(reward_model, buffer, 128, 8);

  policy->eval();
  value->eval();
  std::cout << "explained variance " << explained_variance(value, held_out) << '\n'
            << "greedy agreement " << greedy_agreement(policy, held_out) << '\n'
            << "reward model rmse " << reward_model_rmse(reward_model, held_out) << '\n';
}
