// Double DQN with prioritized experience replay (Schaul et al.) on a toy
// grid-navigation task. Transitions are stored as std::array<Tensor, 5>
// slots in a ring, their priorities in a sum-tree on the host; a batch is
// drawn by stratified sampling over the tree and weighted by importance
// sampling. The exploration schedule is a switch over the phase of
// training, and a sample is redrawn (do/while) when it hits a slot that was
// never filled.
#include <torch/torch.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <vector>

constexpr int64_t kObs = 16;
constexpr int64_t kActions = 4;
constexpr int64_t kCapacity = 1 << 14;

enum Field { kState = 0, kAction, kReward, kNext, kDone };
using Transition = std::array<torch::Tensor, 5>;

class SumTree {
 public:
  SumTree() : tree_(2 * kCapacity, 0.0) {}
  void set(int64_t i, double p) {
    int64_t n = i + kCapacity;
    double delta = p - tree_[n];
    for (; n >= 1; n /= 2)
      tree_[n] += delta;
  }
  double total() const { return tree_[1]; }
  int64_t find(double mass) const {
    int64_t n = 1;
    while (n < kCapacity) {
      n *= 2;
      if (mass > tree_[n]) {
        mass -= tree_[n];
        ++n;
      }
    }
    return n - kCapacity;
  }
  double at(int64_t i) const { return tree_[i + kCapacity]; }

 private:
  std::vector<double> tree_;
};

struct QNetImpl : torch::nn::Module {
  QNetImpl()
      : body(register_module("body", torch::nn::Sequential(torch::nn::Linear(kObs, 128), torch::nn::ReLU(),
                                                           torch::nn::Linear(128, kActions)))) {}
  torch::Tensor forward(const torch::Tensor &s) { return body->forward(s); }
  torch::nn::Sequential body;
};
TORCH_MODULE(QNet);

struct Env {
  std::mt19937 rng{7};
  torch::Tensor reset() { return torch::rand({kObs}); }
  std::pair<torch::Tensor, double> step(int64_t a) {
    return {torch::rand({kObs}), a == static_cast<int64_t>(rng() % kActions) ? 1.0 : 0.0};
  }
};

enum class Phase { Explore, Anneal, Exploit };

double epsilon(Phase phase, int64_t step) {
  switch (phase) {
    case Phase::Explore:
      return 1.0;
    case Phase::Anneal:
      return std::max(0.05, 1.0 - static_cast<double>(step) / 50000.0);
    case Phase::Exploit:
      break;
  }
  return 0.05;
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  QNet online, target;
  online->to(device);
  target->to(device);
  torch::optim::Adam opt(online->parameters(), torch::optim::AdamOptions(1e-4));
  std::vector<Transition> ring(kCapacity);
  SumTree priorities;
  std::mt19937 rng(1);
  Env env;
  auto state = env.reset();
  int64_t filled = 0;
  const int64_t batch = 64;
  const double beta = 0.4;

  for (int64_t step = 0; step < 100000; ++step) {
    Phase phase = step < 5000 ? Phase::Explore : (step < 50000 ? Phase::Anneal : Phase::Exploit);
    int64_t action = static_cast<int64_t>(rng() % kActions);
    if (std::uniform_real_distribution<double>(0, 1)(rng) > epsilon(phase, step)) {
      torch::NoGradGuard no_grad;
      auto q = online->forward(state.to(device).unsqueeze(0));
      auto host = q.argmax(1).to(torch::kCPU, /*non_blocking=*/true);
      // BUG(torch-non-blocking-d2h-race): the greedy action is read before the
      // asynchronous copy to the host has finished.
      action = host.item<int64_t>();
    }
    auto [next, reward] = env.step(action);
    const int64_t slot = filled % kCapacity;
    ring[slot] = Transition{state, torch::tensor(action), torch::tensor(reward), next, torch::tensor(0.0)};
    priorities.set(slot, 1.0);
    ++filled;
    state = next;
    if (filled < 1000)
      continue;

    std::vector<int64_t> idx(batch);
    std::vector<float> weights(batch);
    const double seg = priorities.total() / batch;
    for (int64_t i = 0; i < batch; ++i) {
      int64_t j = 0;
      do {
        j = priorities.find(seg * (i + std::uniform_real_distribution<double>(0, 1)(rng)));
      } while (!ring[j][kState].defined());
      idx[i] = j;
      const double p = priorities.at(j) / priorities.total();
      weights[i] = static_cast<float>(std::pow(std::min<int64_t>(filled, kCapacity) * p, -beta));
    }
    std::vector<torch::Tensor> s, a, r, s2, d;
    for (auto i : idx) {
      const Transition &t = ring[i];
      s.push_back(t[kState]);
      a.push_back(t[kAction]);
      r.push_back(t[kReward]);
      s2.push_back(t[kNext]);
      d.push_back(t[kDone]);
    }
    auto S = torch::stack(s).to(device), S2 = torch::stack(s2).to(device);
    auto A = torch::stack(a).to(device), R = torch::stack(r).to(device).to(torch::kFloat);
    auto is_w = torch::from_blob(weights.data(), {batch}, torch::kFloat).clone();
    is_w = is_w / is_w.max();

    torch::Tensor y;
    {
      // OK(torch-inference-without-no-grad, torch-device-mismatch): the target
      // runs once per step, under a guard; the rewards were moved.
      torch::NoGradGuard no_grad;
      auto a2 = online->forward(S2).argmax(1, true);
      y = R + 0.99 * target->forward(S2).gather(1, a2).squeeze(1);
    }
    auto q = online->forward(S).gather(1, A.unsqueeze(1)).squeeze(1);
    auto td = y - q;
    // BUG(torch-device-mismatch): the importance weights were built on the
    // host from the vector and never moved to the device of the TD errors.
    auto loss = (is_w * td.pow(2)).mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
    // BUG(torch-host-sync-in-loop): the priorities come back to the host on
    // every training step; the warm-up `continue` above skips only steps that
    // do not train.
    auto new_p = td.detach().abs().cpu();
    for (int64_t i = 0; i < batch; ++i) {
      // OK(torch-host-sync-in-loop): 'new_p' is already on the host.
      priorities.set(idx[i], new_p[i].item<double>() + 1e-3);
    }
    if (step % 2000 == 0) {
      torch::NoGradGuard no_grad;
      auto src = online->parameters();
      auto dst = target->parameters();
      for (size_t k = 0; k < src.size(); ++k)
        dst[k].copy_(src[k]);
    }
  }

  // Greedy evaluation.
  double ret = 0;
  auto s = env.reset();
  // BUG(torch-tensor-to-discarded): a leftover upload whose result is thrown
  // away; each step below moves the state itself.
  s.to(device);
  for (int t = 0; t < 200; ++t) {
    // BUG(torch-inference-without-no-grad): an evaluation episode runs the
    // online network with autograd on.
    auto a = online->forward(s.to(device).unsqueeze(0)).argmax(1).item<int64_t>();
    auto [s_next, rew] = env.step(a);
    ret += rew;
    s = s_next;
  }
  std::cout << "greedy return " << ret << "\n";
  return 0;
}
