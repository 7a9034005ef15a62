// Double DQN for a cart-pole balancing rig, warm-started from demonstrations
// (DQfD-style): a heuristic PD controller produces a demonstration set, the
// Q-network is pretrained on it as a classifier through a torch::data loader,
// then the agent learns online from a uniform replay buffer with a cloned
// target network. The agent owns its device, networks and optimizer; the
// caller keeps a window of recent TD losses for the dashboard. At the end the
// Q landscape over (angle, angular velocity) is dumped for the report.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <deque>
#include <iostream>
#include <memory>
#include <random>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kObs = 4, kActions = 2, kBatch = 128, kWarmup = 1000, kTargetSync = 500;
constexpr double kGamma = 0.99;

struct QNetImpl : torch::nn::Module {
  QNetImpl()
      : body(register_module("body", torch::nn::Sequential(torch::nn::Linear(kObs, 128), torch::nn::ReLU(),
                                                           torch::nn::Linear(128, 128), torch::nn::ReLU(),
                                                           torch::nn::Linear(128, kActions)))) {}
  torch::Tensor forward(const torch::Tensor &s) { return body->forward(s); }
  torch::nn::Sequential body;
};
TORCH_MODULE(QNet);

QNet make_qnet(torch::Device device) {
  QNet net;
  net->to(device);
  return net;
}

class CartPole {
 public:
  explicit CartPole(uint32_t seed) : rng_(seed) { reset(); }
  void reset() {
    for (auto &v : s_) v = std::uniform_real_distribution<float>(-0.05f, 0.05f)(rng_);
  }
  // Returns (reward, done); Euler step of the classic cart-pole equations.
  std::pair<float, bool> step(int action) {
    const float force = action == 1 ? 10.f : -10.f, cos_t = std::cos(s_[2]), sin_t = std::sin(s_[2]);
    const float tmp = (force + 0.05f * s_[3] * s_[3] * sin_t) / 1.1f;
    const float alpha = (9.8f * sin_t - cos_t * tmp) / (0.5f * (4.f / 3.f - 0.1f * cos_t * cos_t / 1.1f));
    const float acc = tmp - 0.05f * alpha * cos_t / 1.1f;
    s_ = {s_[0] + 0.02f * s_[1], s_[1] + 0.02f * acc, s_[2] + 0.02f * s_[3], s_[3] + 0.02f * alpha};
    const bool done = std::abs(s_[0]) > 2.4f || std::abs(s_[2]) > 0.21f;
    return {1.f, done};
  }
  int expert_action() const { return s_[2] + 0.5f * s_[3] + 0.05f * s_[1] > 0.f ? 1 : 0; }
  torch::Tensor obs() const { return torch::tensor({s_[0], s_[1], s_[2], s_[3]}); }

 private:
  std::mt19937 rng_;
  std::array<float, 4> s_{};
};

class DemoDataset : public torch::data::datasets::Dataset<DemoDataset> {
 public:
  DemoDataset(torch::Tensor states, torch::Tensor actions) : states_(std::move(states)), actions_(std::move(actions)) {}
  torch::data::Example<> get(size_t i) override { return {states_[i], actions_[i]}; }
  torch::optional<size_t> size() const override { return static_cast<size_t>(states_.size(0)); }

 private:
  torch::Tensor states_, actions_;
};

DemoDataset record_demos(int64_t steps) {
  CartPole env(7);
  std::vector<torch::Tensor> states, actions;
  for (int64_t i = 0; i < steps; ++i) {
    const int a = env.expert_action();
    states.push_back(env.obs()), actions.push_back(torch::tensor(static_cast<int64_t>(a)));
    if (env.step(a).second)
      env.reset();
  }
  return DemoDataset(torch::stack(states), torch::stack(actions));
}

struct Transition { torch::Tensor s, s2; int64_t a; float r, done; };

struct LearnStats {
  std::deque<torch::Tensor> recent_td;
  int64_t updates = 0;
};

struct UpdateHook {
  virtual ~UpdateHook() = default;
  virtual void on_update(int64_t update, const torch::Tensor &td_loss) = 0;
};

class DivergenceAlarm : public UpdateHook {
 public:
  void on_update(int64_t update, const torch::Tensor &td_loss) override {
    // BUG(torch-host-sync-in-loop): Agent::learn calls it after every update.
    const double v = td_loss.item<double>();
    if (v > 100.0)
      std::cerr << "TD loss " << v << " at update " << update << ": diverging?\n";
  }
};

class Agent {
 public:
  Agent(torch::Device device, std::shared_ptr<UpdateHook> hook)
      : device_(device), online_(make_qnet(device)), opt_(online_->parameters(), torch::optim::AdamOptions(5e-4)),
        hook_(std::move(hook)) {
    target_ = QNet(std::dynamic_pointer_cast<QNetImpl>(online_->clone()));
  }

  torch::Device device() const { return device_; }
  QNet &online() { return online_; }
  torch::optim::Adam &optimizer() { return opt_; }

  int64_t greedy(const torch::Tensor &obs) {
    torch::NoGradGuard no_grad;
    return online_->forward(obs.to(device_).unsqueeze(0)).argmax(1).item<int64_t>();
  }

  double learn(const std::deque<Transition> &replay, int updates, LearnStats &stats, std::mt19937 &rng) {
    torch::Tensor last;
    for (int u = 0; u < updates; ++u) {
      std::vector<torch::Tensor> s, s2;
      std::vector<int64_t> a;
      std::vector<float> r, done;
      for (int64_t k = 0; k < kBatch; ++k) {
        const auto &t = replay[rng() % replay.size()];
        s.push_back(t.s), s2.push_back(t.s2), a.push_back(t.a), r.push_back(t.r), done.push_back(t.done);
      }
      auto st = torch::stack(s).to(device_), st2 = torch::stack(s2).to(device_);
      auto at = torch::tensor(a).to(device_), rt = torch::tensor(r).to(device_), dt = torch::tensor(done).to(device_);
      torch::Tensor target;
      {
        torch::NoGradGuard no_grad;
        auto next_a = online_->forward(st2).argmax(1, true);
        target = rt + kGamma * (1.0 - dt) * target_->forward(st2).gather(1, next_a).squeeze(1);
      }
      auto loss = F::smooth_l1_loss(online_->forward(st).gather(1, at.unsqueeze(1)).squeeze(1), target);
      opt_.zero_grad();
      loss.backward();
      torch::nn::utils::clip_grad_norm_(online_->parameters(), 10.0);
      opt_.step();
      // BUG(torch-loss-accumulation-graph): the caller's window keeps the
      // last 200 TD losses, each with its graph.
      stats.recent_td.push_front(loss);
      if (stats.recent_td.size() > 200)
        stats.recent_td.pop_back();
      if (++stats.updates % kTargetSync == 0)
        sync_target();
      hook_->on_update(stats.updates, loss);
      last = loss.detach();
    }
    // OK(torch-host-sync-in-loop): once per call, after this helper's own
    // update loop, and the caller runs it only past the warm-up.
    return last.item<double>();
  }

  void sync_target() {
    torch::NoGradGuard no_grad;
    auto src = online_->parameters(), dst = target_->parameters();
    for (size_t i = 0; i < src.size(); ++i)
      dst[i].copy_(src[i]);
  }

 private:

  torch::Device device_;
  QNet online_, target_{nullptr};
  torch::optim::Adam opt_;
  std::shared_ptr<UpdateHook> hook_;
};

double pretrain_from_demos(Agent &agent, DemoDataset demos, int64_t batch) {
  auto loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      std::move(demos).map(torch::data::transforms::Stack<>()), torch::data::DataLoaderOptions(batch));
  int64_t correct = 0, seen = 0, batches = 0;
  auto it = loader->begin();
  while (it != loader->end()) {
    auto states = it->data.to(agent.device());
    auto actions = it->target.to(agent.device());
    auto q = agent.online()->forward(states);
    auto loss = F::cross_entropy(q, actions);
    agent.optimizer().zero_grad();
    loss.backward();
    agent.optimizer().step();
    // BUG(torch-host-sync-in-loop): the accuracy count is read back after
    // every batch; q is on the agent's device.
    correct += q.argmax(1).eq(actions).sum().item<int64_t>();
    seen += actions.size(0);
    if (++batches % 50 == 0)
      // BUG(torch-empty-cache-in-loop): every 50 batches is still inside
      // the iterator-driven loop.
      c10::cuda::CUDACachingAllocator::emptyCache();
    ++it;
  }
  return static_cast<double>(correct) / static_cast<double>(seen);
}

torch::Tensor q_landscape(QNet &net, const torch::Tensor &states) {
  torch::NoGradGuard no_grad;
  int attempts = 0;
  while (true) {
    try {
      return net->forward(states);
    } catch (c10::OutOfMemoryError &) {
      if (++attempts == 3)
        throw;
      // BUG(torch-empty-cache-oom-retry): the same forward over the same
      // states runs again.
      // BUG(torch-empty-cache-in-loop): on every pass of the retry loop.
      c10::cuda::CUDACachingAllocator::emptyCache();
    }
  }
}

int main() {
  torch::manual_seed(238);
  const bool gpu = torch::cuda::is_available();
  Agent agent(gpu ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU), std::make_shared<DivergenceAlarm>());
  std::cout << "demo accuracy " << pretrain_from_demos(agent, record_demos(20000), 256) << '\n';
  agent.sync_target();

  CartPole env(238);
  std::mt19937 rng(238);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::deque<Transition> replay;
  LearnStats stats;
  for (int64_t step = 0; step < 50000; ++step) {
    const double eps = std::max(0.02, 0.3 - static_cast<double>(step) / 20000.0);
    auto obs = env.obs();
    // OK(torch-host-sync-in-loop): the greedy read sits in the else branch.
    const int64_t action = u(rng) < eps ? static_cast<int64_t>(rng() % kActions) : agent.greedy(obs);
    auto [reward, done] = env.step(static_cast<int>(action));
    replay.push_back({obs, env.obs(), action, reward, done ? 1.f : 0.f});
    if (replay.size() > 50000)
      replay.pop_front();
    if (done)
      env.reset();
    if (replay.size() >= static_cast<size_t>(kWarmup)) {
      const double td = agent.learn(replay, 1, stats, rng);
      if (stats.updates % 5000 == 0)
        std::cout << "update " << stats.updates << " td " << td << '\n';
    }
  }

  auto angles = torch::linspace(-0.2, 0.2, 41), rates = torch::linspace(-1.0, 1.0, 41);
  auto mesh = torch::meshgrid({angles, rates}, "ij");
  auto grid = torch::stack({torch::zeros_like(mesh[0]), torch::zeros_like(mesh[0]), mesh[0], mesh[1]}, -1);
  auto q = q_landscape(agent.online(), grid.reshape({-1, kObs}).to(agent.device()));
  std::cout << "states preferring push-right: " << q.argmax(1).eq(1).sum().item<int64_t>() << " of " << q.size(0)
            << '\n';
}
