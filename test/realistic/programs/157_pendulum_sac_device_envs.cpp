// Soft actor-critic on 64 pendulum swing-up environments simulated directly
// on the device (a port of a CleanRL-style sac_continuous_action.py with a
// torch-only environment, so no host round-trip per step). Twin Q-networks
// with Polyak-averaged targets and a learned temperature. The target copies
// are free functions over torch::nn::Module&, the statistics of the updates
// go into a struct owned by the caller, and evaluation rolls out the
// deterministic policy through a std::function.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>

constexpr int64_t kObs = 3, kAct = 1;
constexpr double kPi = 3.14159265358979323846;

struct PendulumBatch {
  PendulumBatch(int64_t n, torch::Device device)
      : theta(torch::rand({n}, device) * 2 * kPi - kPi), theta_dot(torch::zeros({n}, device)) {}
  torch::Tensor observe() const { return torch::stack({theta.cos(), theta.sin(), theta_dot}, 1); }
  // torque [N, 1] in [-2, 2]; returns the reward [N].
  torch::Tensor step(const torch::Tensor &torque) {
    auto u = torque.squeeze(1).clamp(-2.0, 2.0);
    auto wrapped = torch::remainder(theta + kPi, 2 * kPi) - kPi;
    auto cost = wrapped.pow(2) + 0.1 * theta_dot.pow(2) + 0.001 * u.pow(2);
    theta_dot = (theta_dot + (15.0 * theta.sin() + 3.0 * u) * 0.05).clamp(-8.0, 8.0);
    theta = theta + theta_dot * 0.05;
    return -cost;
  }
  torch::Tensor theta, theta_dot;
};

torch::nn::Sequential mlp(int64_t in, int64_t out) {
  return torch::nn::Sequential(torch::nn::Linear(in, 256), torch::nn::ReLU(), torch::nn::Linear(256, 256),
                               torch::nn::ReLU(), torch::nn::Linear(256, out));
}

struct ActorImpl : torch::nn::Module {
  ActorImpl() : net(register_module("net", mlp(kObs, 2 * kAct))) {}
  // [mean, log_std] of the pre-tanh Gaussian.
  torch::Tensor forward(const torch::Tensor &obs) { return net->forward(obs); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Actor);

struct CriticImpl : torch::nn::Module {
  CriticImpl() : net(register_module("net", mlp(kObs + kAct, 1))) {}
  torch::Tensor forward(const torch::Tensor &obs, const torch::Tensor &act) {
    return net->forward(torch::cat({obs, act}, 1)).squeeze(1);
  }
  torch::nn::Sequential net;
};
TORCH_MODULE(Critic);

// Squashed sample and its log-probability.
std::pair<torch::Tensor, torch::Tensor> sample_action(Actor &actor, const torch::Tensor &obs) {
  auto out = actor->forward(obs).chunk(2, 1);
  auto log_std = out[1].clamp(-5.0, 2.0);
  auto pre = out[0] + log_std.exp() * torch::randn_like(out[0]);
  auto act = torch::tanh(pre);
  auto logp = (-0.5 * ((pre - out[0]) / log_std.exp()).pow(2) - log_std - 0.5 * std::log(2 * kPi)).sum(1) -
              torch::log(1 - act.pow(2) + 1e-6).sum(1);
  return {act * 2.0, logp};
}

void hard_update(torch::nn::Module &target, const torch::nn::Module &source) {
  torch::NoGradGuard no_grad;
  auto tp = target.parameters();
  auto sp = source.parameters();
  for (size_t i = 0; i < tp.size(); ++i)
    tp[i].copy_(sp[i]);
}

void soft_update(torch::nn::Module &target, const torch::nn::Module &source, double tau) {
  torch::NoGradGuard no_grad;
  auto tp = target.parameters();
  auto sp = source.parameters();
  for (size_t i = 0; i < tp.size(); ++i)
    tp[i].mul_(1.0 - tau).add_(sp[i], tau);
}

struct Replay {
  Replay(int64_t capacity, torch::Device device)
      : obs(torch::zeros({capacity, kObs}, device)), act(torch::zeros({capacity, kAct}, device)),
        rew(torch::zeros({capacity}, device)), next(torch::zeros({capacity, kObs}, device)), cap(capacity) {}
  void add(const torch::Tensor &o, const torch::Tensor &a, const torch::Tensor &r, const torch::Tensor &n2) {
    const int64_t n = o.size(0);
    auto idx = torch::arange(head, head + n, torch::TensorOptions().dtype(torch::kLong).device(obs.device())) % cap;
    obs.index_copy_(0, idx, o);
    act.index_copy_(0, idx, a);
    rew.index_copy_(0, idx, r);
    next.index_copy_(0, idx, n2);
    head = (head + n) % cap;
    size = std::min(size + n, cap);
  }
  torch::Tensor obs, act, rew, next;
  int64_t cap, head = 0, size = 0;
};

struct UpdateStats {
  torch::Tensor q_loss_sum, pi_loss_sum;
  int64_t updates = 0;
};

class SacAgent {
 public:
  explicit SacAgent(torch::Device device)
      : log_alpha_(torch::zeros({1}, torch::TensorOptions().device(device).requires_grad(true))),
        q_opt_(params_of(q1_, q2_), torch::optim::AdamOptions(3e-4)),
        pi_opt_(actor_->parameters(), torch::optim::AdamOptions(3e-4)),
        alpha_opt_({log_alpha_}, torch::optim::AdamOptions(3e-4)) {
    for (auto *m : {&q1_, &q2_, &q1_t_, &q2_t_})
      (*m)->to(device);
    actor_->to(device);
    hard_update(*q1_t_, *q1_);
    hard_update(*q2_t_, *q2_);
  }

  Actor &actor() { return actor_; }

  void update(Replay &buffer, int64_t batch, UpdateStats &stats) {
    auto idx = torch::randint(0, buffer.size, {batch}, torch::TensorOptions().dtype(torch::kLong).device(buffer.obs.device()));
    auto obs = buffer.obs.index_select(0, idx), act = buffer.act.index_select(0, idx);
    auto rew = buffer.rew.index_select(0, idx), next = buffer.next.index_select(0, idx);
    // BUG(torch-host-sync-in-loop): the temperature is read back to the host
    // on every gradient step.
    const double alpha = log_alpha_.exp().item<double>();

    torch::Tensor target;
    {
      torch::NoGradGuard no_grad;
      auto [next_act, next_logp] = sample_action(actor_, next);
      // OK(torch-device-mismatch): the constructor moved all four critics.
      auto q_next = torch::min(q1_t_->forward(next, next_act), q2_t_->forward(next, next_act)) - alpha * next_logp;
      target = rew + 0.99 * q_next;
    }
    // OK(torch-device-mismatch): q1_ and q2_ are on `device`, like the batch.
    auto q_loss = torch::mse_loss(q1_->forward(obs, act), target) + torch::mse_loss(q2_->forward(obs, act), target);
    q_opt_.zero_grad();
    q_loss.backward();
    q_opt_.step();

    auto [new_act, logp] = sample_action(actor_, obs);
    // OK(torch-device-mismatch): as above.
    auto pi_loss = (alpha * logp - torch::min(q1_->forward(obs, new_act), q2_->forward(obs, new_act))).mean();
    pi_opt_.zero_grad();
    pi_loss.backward();
    pi_opt_.step();

    auto alpha_loss = -(log_alpha_ * (logp.detach() - static_cast<double>(kAct))).mean();
    alpha_opt_.zero_grad();
    alpha_loss.backward();
    alpha_opt_.step();

    soft_update(*q1_t_, *q1_, 0.005);
    soft_update(*q2_t_, *q2_, 0.005);

    // BUG(torch-loss-accumulation-graph): the caller's running sum keeps
    // every critic loss and its graph until the stats are printed.
    stats.q_loss_sum += q_loss;
    // OK(torch-loss-accumulation-graph): the policy loss is detached first.
    stats.pi_loss_sum += pi_loss.detach();
    ++stats.updates;
  }

 private:
  static std::vector<torch::Tensor> params_of(Critic &a, Critic &b) {
    auto p = a->parameters();
    for (auto &t : b->parameters())
      p.push_back(t);
    return p;
  }
  Actor actor_;
  Critic q1_, q2_, q1_t_, q2_t_;
  torch::Tensor log_alpha_;
  torch::optim::Adam q_opt_, pi_opt_, alpha_opt_;
};

double evaluate(const std::function<torch::Tensor(const torch::Tensor &)> &policy, torch::Device device) {
  torch::NoGradGuard no_grad;
  PendulumBatch env(16, device);
  auto ret = torch::zeros({16}, device);
  for (int t = 0; t < 200; ++t)
    ret += env.step(policy(env.observe()));
  return ret.mean().item<double>();
}

// Deterministic torque over a (theta, theta_dot) grid, for the report's plot.
void write_policy_map(Actor &actor, torch::Device device, const std::string &path) {
  std::ofstream out(path);
  auto theta = torch::linspace(-kPi, kPi, 64, torch::TensorOptions().device(device));
  for (int64_t i = 0; i < 64; ++i) {
    const double omega = -8.0 + 16.0 * static_cast<double>(i) / 63.0;
    auto obs = torch::stack({theta.cos(), theta.sin(), torch::full_like(theta, omega)}, 1);
    // BUG(torch-inference-without-no-grad): the map is only written out, yet
    // autograd records all 64 forwards.
    auto torque = (torch::tanh(actor->forward(obs).chunk(2, 1)[0]) * 2.0).squeeze(1).cpu();
    auto a = torque.accessor<float, 1>();
    for (int64_t j = 0; j < a.size(0); ++j)
      out << omega << ',' << j << ',' << a[j] << '\n';
  }
}

int main() {
  torch::manual_seed(157);
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  SacAgent agent(device);
  Replay buffer(200000, device);
  PendulumBatch envs(64, device);
  UpdateStats stats{torch::zeros({}, device), torch::zeros({}, device)};

  const int64_t total_steps = 60000, learning_starts = 5000;
  for (int64_t t = 0; t < total_steps; ++t) {
    if (t % 200 == 0)
      envs = PendulumBatch(64, device);
    auto obs = envs.observe();
    torch::Tensor act, rew;
    {
      torch::NoGradGuard no_grad;
      act = t < learning_starts ? torch::rand({64, kAct}, device) * 4.0 - 2.0 : sample_action(agent.actor(), obs).first;
      rew = envs.step(act);
    }
    buffer.add(obs, act, rew, envs.observe());
    if (t < learning_starts)
      continue;
    agent.update(buffer, 256, stats);
    if (t % 5000 == 0) {
      // OK(torch-host-sync-in-loop): the running sums are read every 5000 steps.
      std::cout << "t " << t << " q loss " << stats.q_loss_sum.item<double>() / stats.updates << " pi loss "
                << stats.pi_loss_sum.item<double>() / stats.updates << '\n';
      stats = UpdateStats{torch::zeros({}, device), torch::zeros({}, device)};
    }
  }

  Actor &actor = agent.actor();
  auto greedy = [&actor](const torch::Tensor &obs) {
    // OK(torch-inference-without-no-grad): evaluate() holds a NoGradGuard
    // around every call of the policy.
    return torch::tanh(actor->forward(obs).chunk(2, 1)[0]) * 2.0;
  };
  std::cout << "mean return " << evaluate(greedy, device) << '\n';
  write_policy_map(actor, device, "policy_map.csv");
  return 0;
}
