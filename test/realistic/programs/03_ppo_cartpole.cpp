// PPO on a toy continuous-state environment: rollout collection, GAE, and a
// clipped-objective update with early stopping on the approximate KL.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <vector>

struct PpoConfig {
  int64_t obs_dim = 4;
  int64_t n_actions = 2;
  int64_t horizon = 256;
  int64_t epochs = 4;
  double gamma = 0.99;
  double lam = 0.95;
  double clip = 0.2;
  double target_kl = 0.02;
};

// A toy environment whose observations are host tensors.
class ToyEnv {
 public:
  explicit ToyEnv(int64_t obs_dim) : obs_dim_(obs_dim) {}
  torch::Tensor reset() { t_ = 0; return torch::randn({obs_dim_}); }
  std::pair<torch::Tensor, double> step(int64_t action) {
    ++t_;
    double reward = action == (t_ % 2) ? 1.0 : 0.0;
    return {torch::randn({obs_dim_}), reward};
  }
  bool done() const { return t_ >= 200; }

 private:
  int64_t obs_dim_;
  int64_t t_ = 0;
};

struct ActorCriticImpl : torch::nn::Module {
  ActorCriticImpl(int64_t obs_dim, int64_t n_actions)
      : body(register_module("body", torch::nn::Linear(obs_dim, 64))),
        pi(register_module("pi", torch::nn::Linear(64, n_actions))),
        v(register_module("v", torch::nn::Linear(64, 1))) {}
  std::pair<torch::Tensor, torch::Tensor> forward(torch::Tensor obs) {
    auto h = torch::tanh(body(obs));
    return {torch::log_softmax(pi(h), -1), v(h).squeeze(-1)};
  }
  torch::nn::Linear body, pi, v;
};
TORCH_MODULE(ActorCritic);

struct Rollout {
  std::vector<torch::Tensor> obs;
  std::vector<int64_t> actions;
  std::vector<double> rewards, values, log_probs;
};

Rollout collect(ActorCritic &policy, ToyEnv &env, const PpoConfig &cfg, torch::Device device) {
  Rollout r;
  auto obs = env.reset();
  for (int64_t t = 0; t < cfg.horizon; ++t) {
    // BUG(torch-inference-without-no-grad): acting needs no graph; nothing
    // derived from this forward ever reaches backward().
    auto out = policy->forward(obs.to(device).unsqueeze(0));
    auto log_probs = out.first.squeeze(0);
    int64_t action = torch::multinomial(log_probs.exp(), 1).item<int64_t>();
    r.obs.push_back(obs);
    r.actions.push_back(action);
    r.values.push_back(out.second.item<double>());
    r.log_probs.push_back(log_probs[action].item<double>());
    auto next = env.step(action);
    r.rewards.push_back(next.second);
    obs = env.done() ? env.reset() : next.first;
  }
  return r;
}

std::vector<double> advantages(const Rollout &r, const PpoConfig &cfg) {
  std::vector<double> adv(r.rewards.size());
  double gae = 0;
  for (int64_t t = static_cast<int64_t>(r.rewards.size()) - 1; t >= 0; --t) {
    double next_value = t + 1 < static_cast<int64_t>(r.values.size()) ? r.values[t + 1] : 0.0;
    double delta = r.rewards[t] + cfg.gamma * next_value - r.values[t];
    gae = delta + cfg.gamma * cfg.lam * gae;
    adv[t] = gae;
  }
  return adv;
}

void update(ActorCritic &policy, torch::optim::Adam &opt, const Rollout &r,
            const PpoConfig &cfg, torch::Device device) {
  auto obs = torch::stack(r.obs).to(device);
  auto actions = torch::tensor(r.actions, torch::kLong).to(device);
  auto old_log_probs = torch::tensor(r.log_probs, torch::kFloat).to(device);
  auto adv_vec = advantages(r, cfg);
  auto adv = torch::tensor(adv_vec, torch::kFloat).to(device);
  auto returns = adv + torch::tensor(r.values, torch::kFloat).to(device);
  adv = (adv - adv.mean()) / (adv.std() + 1e-8);

  std::map<std::string, torch::Tensor> metrics{{"policy", torch::zeros({}, device)},
                                               {"value", torch::zeros({}, device)}};
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    auto out = policy->forward(obs);
    auto log_probs = out.first.gather(1, actions.unsqueeze(1)).squeeze(1);
    auto ratio = torch::exp(log_probs - old_log_probs);
    auto clipped = torch::clamp(ratio, 1 - cfg.clip, 1 + cfg.clip);
    auto policy_loss = -torch::min(ratio * adv, clipped * adv).mean();
    auto value_loss = torch::mse_loss(out.second, returns);
    opt.zero_grad();
    (policy_loss + 0.5 * value_loss).backward();
    opt.step();

    // BUG(torch-loss-accumulation-graph): a map element declared before the
    // loop accumulates the policy loss with its graph, every epoch.
    metrics["policy"] += policy_loss;
    // OK(torch-loss-accumulation-graph): detached.
    metrics["value"] += value_loss.detach();

    auto approx_kl = (old_log_probs - log_probs).mean();
    // BUG(torch-host-sync-in-loop): the early-stop test reads approx_kl on
    // the host after every update step.
    if (approx_kl.item<double>() > 1.5 * cfg.target_kl)
      break;
  }
  std::cout << "policy " << metrics["policy"].item<double>() << " value "
            << metrics["value"].item<double>() << '\n';
}

int main() {
  PpoConfig cfg;
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  ActorCritic policy(cfg.obs_dim, cfg.n_actions);
  policy->to(device);
  torch::optim::Adam opt(policy->parameters(), torch::optim::AdamOptions(3e-4));
  ToyEnv env(cfg.obs_dim);
  for (int iteration = 0; iteration < 50; ++iteration) {
    auto rollout = collect(policy, env, cfg, device);
    update(policy, opt, rollout, cfg, device);
  }
  return 0;
}
