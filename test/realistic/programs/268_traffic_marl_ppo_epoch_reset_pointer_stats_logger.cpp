// Multi-agent traffic-signal control on a grid of intersections: one PPO
// agent per intersection, each with its own policy and optimizer, trained on
// rollouts of a queue simulator. The update runs several epochs of shuffled
// minibatches over each agent's rollout buffer, with KL early stopping.
// Greedy episodes then report the mean queue penalty per intersection.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kLanes = 8, kPhases = 4, kObs = kLanes + kPhases;

struct SignalPolicyImpl : torch::nn::Module {
  SignalPolicyImpl()
      : trunk(register_module("trunk", torch::nn::Sequential(torch::nn::Linear(kObs, 64), torch::nn::Tanh(),
                                                             torch::nn::Dropout(0.1), torch::nn::Linear(64, 64),
                                                             torch::nn::Tanh()))),
        pi(register_module("pi", torch::nn::Linear(64, kPhases))),
        v(register_module("v", torch::nn::Linear(64, 1))) {}
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor &obs) {
    auto h = trunk->forward(obs);  // [B, 64]
    return {pi->forward(h), v->forward(h).squeeze(-1)};
  }
  torch::nn::Sequential trunk;
  torch::nn::Linear pi, v;
};
TORCH_MODULE(SignalPolicy);

struct PPOConfig {
  int64_t agents = 9, horizon = 256, epochs = 4, minibatch = 64, iterations = 100, log_every = 20;
  double lr = 3e-4, clip = 0.2, vf_coef = 0.5, ent_coef = 0.01, gamma = 0.99, lam = 0.95, max_kl = 0.03;
};

// Queue simulator: Poisson arrivals per lane; the green phase drains two lanes.
class GridSim {
 public:
  explicit GridSim(int64_t n) : queues_(torch::zeros({n, kLanes})), phase_(static_cast<size_t>(n), 0) {}
  torch::Tensor observe(int64_t i) const {
    auto onehot = torch::zeros({kPhases});
    onehot[phase_[i]] = 1.0;
    return torch::cat({queues_[i] / 20.0, onehot});
  }
  float apply(int64_t i, int64_t phase) {
    phase_[i] = phase;
    auto q = queues_[i];
    q += torch::poisson(torch::full({kLanes}, 0.6));
    q.slice(0, 2 * phase, 2 * phase + 2).sub_(3.0).clamp_min_(0.0);
    // OK(torch-host-sync-in-loop): the queues live on the host.
    return -q.sum().item<float>() / kLanes;
  }
  void reset() { queues_.zero_(), std::fill(phase_.begin(), phase_.end(), 0); }
 private:
  torch::Tensor queues_;
  std::vector<int64_t> phase_;
};

struct Rollout {
  std::vector<torch::Tensor> obs;
  std::vector<int64_t> actions;
  std::vector<float> logp, values, rewards;
  void clear() { obs.clear(), actions.clear(), logp.clear(), values.clear(), rewards.clear(); }
};

struct Batch { torch::Tensor obs, actions, old_logp, returns, adv; };

Batch finalize(const Rollout &r, double gamma, double lam, torch::Device device) {
  const size_t n = r.rewards.size();
  std::vector<float> adv(n), ret(n);
  double next_adv = 0.0, next_value = 0.0;
  for (size_t k = n; k-- > 0;) {
    next_adv = r.rewards[k] + gamma * next_value - r.values[k] + gamma * lam * next_adv;
    adv[k] = static_cast<float>(next_adv);
    ret[k] = static_cast<float>(next_adv + r.values[k]);
    next_value = r.values[k];
  }
  auto a = torch::tensor(adv);
  a = (a - a.mean()) / (a.std() + 1e-8);
  return {torch::stack(r.obs).to(device), torch::tensor(r.actions).to(device), torch::tensor(r.logp).to(device),
          torch::tensor(ret).to(device), a.to(device)};
}

struct Agent { SignalPolicy policy; std::unique_ptr<torch::optim::Adam> opt; };

void clear_grads(torch::optim::Optimizer *opt) { opt->zero_grad(); }

// Per-update statistics for the console.
struct UpdateStats {
  torch::Tensor policy_sum, value_sum;
  int64_t n = 0;
  void reset(torch::Device d) { policy_sum = torch::zeros({}, d), value_sum = torch::zeros({}, d), n = 0; }
  void add(const torch::Tensor &policy_loss, const torch::Tensor &value_loss) {
    // BUG(torch-loss-accumulation-graph): the clipped surrogate still holds
    // the minibatch's graph; every minibatch of the update stays alive.
    policy_sum += policy_loss;
    // OK(torch-loss-accumulation-graph): detached before it is summed.
    value_sum += value_loss.detach();
    ++n;
  }
};

// Run-level metrics: host counters and device running sums, by name.
class MetricBoard {
 public:
  using Metric = std::variant<double, torch::Tensor>;
  torch::Tensor &tensor(const std::string &name, const torch::Tensor &like) {
    Metric &m = values_[name];
    if (!std::holds_alternative<torch::Tensor>(m)) m = torch::zeros({}, like.options());
    return std::get<torch::Tensor>(m);
  }
  double &scalar(const std::string &name) {
    Metric &m = values_[name];
    return std::holds_alternative<double>(m) ? std::get<double>(m) : (m = 0.0, std::get<double>(m));
  }
 private:
  std::map<std::string, Metric> values_;
};

class TrafficTrainer {
 public:
  TrafficTrainer(const PPOConfig &cfg, torch::Device device) : cfg_(cfg), device_(device), sim_(cfg.agents) {
    for (int64_t i = 0; i < cfg.agents; ++i) {
      SignalPolicy p;
      p->to(device_);
      auto opt = std::make_unique<torch::optim::Adam>(p->parameters(), torch::optim::AdamOptions(cfg.lr));
      agents_.push_back(Agent{p, std::move(opt)});
    }
  }
  std::vector<Agent> &agents() { return agents_; }
  void run() {
    std::vector<Rollout> rollouts(agents_.size());
    for (int64_t it = 0; it < cfg_.iterations; ++it) {
      collect(rollouts);
      for (size_t i = 0; i < agents_.size(); ++i) {
        const Batch b = finalize(rollouts[i], cfg_.gamma, cfg_.lam, device_);
        update(agents_[i], b, it);
      }
    }
  }

 private:
  void collect(std::vector<Rollout> &rollouts) {
    torch::NoGradGuard no_grad;
    for (auto &a : agents_) a.policy->eval();
    sim_.reset();
    for (auto &r : rollouts) r.clear();
    for (int64_t t = 0; t < cfg_.horizon; ++t) {
      for (int64_t i = 0; i < cfg_.agents; ++i) {
        auto obs = sim_.observe(i);
        // OK(torch-eval-mode-missing, torch-inference-without-no-grad): every
        // policy was put in eval mode above, under a NoGradGuard.
        auto [logits, value] = agents_[static_cast<size_t>(i)].policy->forward(obs.to(device_).unsqueeze(0));
        auto logp = F::log_softmax(logits.squeeze(0), 0);
        // OK(torch-host-sync-in-loop): collecting a rollout trains nothing.
        const int64_t action = torch::multinomial(logp.exp(), 1).item<int64_t>();
        auto &r = rollouts[static_cast<size_t>(i)];
        r.obs.push_back(obs), r.actions.push_back(action);
        r.logp.push_back(logp[action].item<float>());
        r.values.push_back(value.item<float>());
        r.rewards.push_back(sim_.apply(i, action));
      }
    }
  }

  void update(Agent &agent, const Batch &b, int64_t iter) {
    agent.policy->train();
    stats_.reset(device_);
    const int64_t n = b.obs.size(0);
    int64_t step = 0;
    torch::Tensor last_loss;
    std::vector<float> curve;
    auto log_step = [&last_loss, &curve]() {
      // BUG(torch-host-sync-in-loop): the learning-curve logger reads the
      // device loss on every minibatch.
      curve.push_back(last_loss.item<float>());
    };
    bool stop = false;
    for (int64_t epoch = 0; epoch < cfg_.epochs && !stop; ++epoch) {
      clear_grads(agent.opt.get());
      auto perm = torch::randperm(n, torch::TensorOptions().dtype(torch::kLong).device(device_));
      for (int64_t s = 0; s + cfg_.minibatch <= n; s += cfg_.minibatch) {
        auto idx = perm.slice(0, s, s + cfg_.minibatch);
        auto [logits, values] = agent.policy->forward(b.obs.index_select(0, idx));
        auto logp_all = F::log_softmax(logits, 1);
        auto logp = logp_all.gather(1, b.actions.index_select(0, idx).unsqueeze(1)).squeeze(1);
        auto old = b.old_logp.index_select(0, idx), adv = b.adv.index_select(0, idx);
        auto ratio = (logp - old).exp();
        auto policy_loss = -torch::min(ratio * adv, ratio.clamp(1 - cfg_.clip, 1 + cfg_.clip) * adv).mean();
        auto value_loss = F::mse_loss(values, b.returns.index_select(0, idx));
        auto entropy = -(logp_all.exp() * logp_all).sum(1).mean();
        auto loss = policy_loss + cfg_.vf_coef * value_loss - cfg_.ent_coef * entropy;
        loss.backward();
        torch::nn::utils::clip_grad_norm_(agent.policy->parameters(), 0.5);
        // BUG(torch-missing-zero-grad): the reset runs once per epoch; the
        // next minibatch's backward() adds to the gradients just applied.
        agent.opt->step();
        stats_.add(policy_loss, value_loss);
        // BUG(torch-loss-accumulation-graph): the run-level entropy sum is a
        // reference into the board's map; it keeps every minibatch's graph.
        board_.tensor("entropy", entropy) += entropy;
        board_.scalar("minibatches") += 1.0;
        last_loss = loss.detach();
        log_step();
        ++step;
        auto kl = (old - logp).mean();
        // BUG(torch-host-sync-in-loop): the KL early stop reads the device
        // value after every minibatch.
        if ((stop = kl.item<double>() > cfg_.max_kl)) break;
      }
    }
    if (iter % cfg_.log_every == 0)
      // OK(torch-host-sync-in-loop): one read per logged update.
      std::cout << "iter " << iter << " steps " << step << " policy " << (stats_.policy_sum / stats_.n).item<double>()
                << " value " << (stats_.value_sum / stats_.n).item<double>() << " last "
                << (curve.empty() ? 0.f : curve.back()) << " entropy "
                << (board_.tensor("entropy", b.adv) / board_.scalar("minibatches")).item<double>() << "\n";
  }

  PPOConfig cfg_;
  torch::Device device_;
  GridSim sim_;
  std::vector<Agent> agents_;
  UpdateStats stats_;
  MetricBoard board_;
};

double greedy_queue(std::vector<Agent> &agents, GridSim &sim, torch::Device device, int64_t steps) {
  torch::NoGradGuard no_grad;
  sim.reset();
  double total = 0.0;
  for (int64_t t = 0; t < steps; ++t)
    for (size_t i = 0; i < agents.size(); ++i) {
      auto obs = sim.observe(static_cast<int64_t>(i)).to(device).unsqueeze(0);
      // BUG(torch-eval-mode-missing): update() left every policy in training
      // mode; greedy actions are taken with dropout on.
      auto logits = agents[i].policy->forward(obs).first;
      total -= sim.apply(static_cast<int64_t>(i), logits.argmax(1).item<int64_t>());
    }
  return total / static_cast<double>(steps * static_cast<int64_t>(agents.size()));
}

int main(int argc, char **argv) {
  torch::manual_seed(268);
  PPOConfig cfg;
  if (argc > 1) cfg.iterations = std::stoll(argv[1]);  // e.g. 20 for a smoke run
  // OK(torch-cuda-unguarded): the ternary checks for a GPU.
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  TrafficTrainer trainer(cfg, device);
  trainer.run();
  GridSim sim(cfg.agents);
  std::cout << "mean queue length " << greedy_queue(trainer.agents(), sim, device, 500) << "\n";
}
