// Advantage actor-critic on a batch of 1-D walkers that must reach a target
// (state: position and target; actions: left, stay, right). The environment
// is simulated with tensors. The actor and the critic have their own Adam
// optimizers. Mixed precision comes from an UpdateScope object whose member
// is an RAII autocast guard (the scope also times the update for the log);
// main() selects bfloat16 for CUDA autocast before training starts.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kWalkers = 64;
constexpr int64_t kHorizon = 16;
constexpr int64_t kActions = 3;

// Saves CUDA autocast's state, enables it, and restores the saved state.
class AutocastGuard {
public:
  AutocastGuard() {
#if TORCH_VERSION_MAJOR >= 2
    previous_ = at::autocast::is_autocast_enabled(at::kCUDA);
    // OK(torch-autocast-region): RAII; the destructor restores the saved state.
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    previous_ = at::autocast::is_enabled();
    // OK(torch-autocast-region): RAII; the destructor restores the saved state.
    at::autocast::set_enabled(true);
#endif
  }
  ~AutocastGuard() {
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_enabled(at::kCUDA, previous_);
#else
    at::autocast::set_enabled(previous_);
#endif
    if (!previous_)
      at::autocast::clear_cache();
  }
  AutocastGuard(const AutocastGuard &) = delete;
  AutocastGuard &operator=(const AutocastGuard &) = delete;

private:
  bool previous_ = false;
};

double g_update_ms = 0;

// One timed, mixed-precision stretch of an update.
struct UpdateScope {
  AutocastGuard amp;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~UpdateScope() {
    g_update_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
};

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t out)
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(2, 64), torch::nn::Tanh(),
                                                         torch::nn::Linear(64, 64), torch::nn::Tanh(),
                                                         torch::nn::Linear(64, out)))) {}
  torch::Tensor forward(torch::Tensor x) { return net->forward(x); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Mlp);

struct Rollout {
  torch::Tensor states, actions, returns;
};

// Plays kHorizon steps with actions sampled from the actor.
Rollout collect(Mlp &actor, torch::Device device, double gamma) {
  torch::NoGradGuard no_grad;
  auto opts = torch::TensorOptions().device(device);
  auto pos = torch::randint(-5, 6, {kWalkers}, opts);
  auto target = torch::randint(-5, 6, {kWalkers}, opts);
  std::vector<torch::Tensor> states, actions, rewards;
  for (int64_t t = 0; t < kHorizon; ++t) {
    auto s = torch::stack({pos / 5.0, target / 5.0}, 1);
    // OK(torch-eval-mode-missing): the actor has no Dropout or BatchNorm.
    auto a = torch::multinomial(torch::softmax(actor->forward(s), 1), 1).squeeze(1);
    pos = (pos + a.to(torch::kFloat) - 1).clamp(-6, 6);
    states.push_back(s);
    actions.push_back(a);
    rewards.push_back(-(pos - target).abs() * 0.1);
  }
  auto ret = torch::zeros({kWalkers}, opts);
  std::vector<torch::Tensor> returns(kHorizon);
  for (int64_t t = kHorizon - 1; t >= 0; --t) {
    ret = rewards[t] + gamma * ret;
    returns[t] = ret;
  }
  return {torch::cat(states), torch::cat(actions), torch::cat(returns)};
}

struct A2CConfig {
  int updates = 400;
  int critic_warmup = 50;
  double gamma = 0.95;
  double entropy = 0.01;
};

void train_a2c(Mlp &actor, Mlp &critic, torch::Device device, const A2CConfig &cfg) {
  actor->train();
  critic->train();
  torch::optim::Adam actor_opt(actor->parameters(), torch::optim::AdamOptions(3e-4));
  torch::optim::Adam critic_opt(critic->parameters(), torch::optim::AdamOptions(1e-3));
  for (int update = 0; update < cfg.updates; ++update) {
    auto roll = collect(actor, device, cfg.gamma);

    torch::Tensor v_loss;
    {
      UpdateScope scope;
      auto values = critic->forward(roll.states).squeeze(1);
      v_loss = torch::mse_loss(values.to(torch::kFloat), roll.returns);
      // BUG(torch-autocast-region): the scope's guard is still alive here, so
      // the critic's backward() runs inside the autocast region.
      v_loss.backward();
    }
    // BUG(torch-missing-zero-grad): during the warm-up the `continue` below
    // skips the resets at the end of the body, so each warm-up step of the
    // critic re-applies all earlier warm-up gradients.
    critic_opt.step();
    if (update < cfg.critic_warmup)
      continue;

    torch::Tensor pi_loss;
    {
      UpdateScope scope;
      torch::Tensor advantages;
      {
        torch::NoGradGuard no_grad;
        advantages = roll.returns - critic->forward(roll.states).squeeze(1).to(torch::kFloat);
      }
      auto logp = torch::log_softmax(actor->forward(roll.states).to(torch::kFloat), 1);
      auto chosen = logp.gather(1, roll.actions.unsqueeze(1)).squeeze(1);
      auto entropy = -(logp.exp() * logp).sum(1).mean();
      pi_loss = -(chosen * advantages).mean() - cfg.entropy * entropy;
    }
    // OK(torch-autocast-region): the scope closed before backward(), and
    // main() set bfloat16, which needs no loss scaling.
    pi_loss.backward();
    // OK(torch-missing-zero-grad): both networks are reset right below.
    actor_opt.step();
    actor_opt.zero_grad();
    critic_opt.zero_grad();

    if (update % 50 == 0)
      std::cout << "update " << update << " value loss " << v_loss.item<float>() << " policy loss "
                << pi_loss.item<float>() << " update ms " << g_update_ms << '\n';
  }
}

double greedy_distance(Mlp &actor, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto opts = torch::TensorOptions().device(device);
  auto pos = torch::randint(-5, 6, {1024}, opts);
  auto target = torch::randint(-5, 6, {1024}, opts);
  for (int64_t t = 0; t < kHorizon; ++t) {
    // OK(torch-eval-mode-missing): no mode-dependent layer in the actor.
    auto a = actor->forward(torch::stack({pos / 5.0, target / 5.0}, 1)).argmax(1);
    pos = (pos + a.to(torch::kFloat) - 1).clamp(-6, 6);
  }
  return (pos - target).abs().mean().item<double>();
}

int main() {
  torch::manual_seed(115);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Mlp actor(kActions), critic(1);
  actor->to(device);
  critic->to(device);
  at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
  A2CConfig cfg;
  train_a2c(actor, critic, device, cfg);
  std::cout << "mean final distance " << greedy_distance(actor, device) << '\n';
}
