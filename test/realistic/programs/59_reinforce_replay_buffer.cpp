// Batch policy-gradient (REINFORCE with a mean baseline) on a toy corridor
// environment: one rollout phase with the initial policy fills a ReplayBuffer
// of host-side transitions, then several update epochs re-evaluate the policy
// on the whole buffer in one batch (so the rollout needs no graph). The
// environment and the buffer live on the CPU.
#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <iostream>
#include <vector>

constexpr int64_t kObs = 6;
constexpr int64_t kActions = 2;

class Corridor {
 public:
  torch::Tensor reset() {
    pos_ = 0;
    return observe();
  }
  // Moves left or right; reward 1 at the far end.
  float step(int64_t action, bool &done) {
    pos_ = std::max<int64_t>(0, pos_ + (action == 1 ? 1 : -1));
    done = pos_ >= kObs - 1 || ++t_ % 50 == 0;
    return pos_ >= kObs - 1 ? 1.0f : -0.01f;
  }
  torch::Tensor observe() const {
    auto o = torch::zeros({kObs});
    o[pos_] = 1.0;
    return o;
  }

 private:
  int64_t pos_ = 0;
  int64_t t_ = 0;
};

struct Transition {
  torch::Tensor obs;
  int64_t action;
  float reward;
  bool done;
};

class ReplayBuffer {
 public:
  void push(Transition t) { items_.push_back(std::move(t)); }
  void clear() { items_.clear(); }
  int64_t size() const { return static_cast<int64_t>(items_.size()); }

  torch::Tensor observations() const {
    std::vector<torch::Tensor> obs;
    for (const auto &t : items_)
      obs.push_back(t.obs);
    return torch::stack(obs);
  }
  torch::Tensor actions() const {
    auto a = torch::empty({size()}, torch::kLong);
    for (int64_t i = 0; i < size(); ++i)
      a[i] = items_[i].action;
    return a;
  }
  std::vector<float> discounted_returns(float gamma) const {
    std::vector<float> out(items_.size());
    float g = 0.0f;
    for (int64_t i = size() - 1; i >= 0; --i) {
      g = items_[i].done ? items_[i].reward : items_[i].reward + gamma * g;
      out[i] = g;
    }
    return out;
  }

 private:
  std::deque<Transition> items_;
};

torch::nn::Sequential make_policy() {
  return torch::nn::Sequential(torch::nn::Linear(kObs, 32), torch::nn::Tanh(), torch::nn::Linear(32, kActions));
}

void collect(torch::nn::Sequential &policy, Corridor &env, ReplayBuffer &buffer, torch::Device device,
             int64_t steps) {
  auto obs = env.reset();
  for (int64_t t = 0; t < steps; ++t) {
    // BUG(torch-inference-without-no-grad): acting needs no graph, and this
    // loop never calls backward(); autograd records every step.
    auto logits = policy->forward(obs.to(device));
    auto action_dev = torch::multinomial(torch::softmax(logits, -1), 1);
    auto action_host = action_dev.to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): the sampled action is read before
    // the asynchronous copy back has finished.
    const int64_t action = action_host.item<int64_t>();
    bool done = false;
    const float r = env.step(action, done);
    buffer.push({obs, action, r, done});
    obs = done ? env.reset() : env.observe();
  }
}

double update(torch::nn::Sequential &policy, torch::optim::Adam &opt, ReplayBuffer &buffer,
              torch::Device device, int64_t iter) {
  auto rets = buffer.discounted_returns(0.99f);
  auto returns = torch::from_blob(rets.data(), {static_cast<int64_t>(rets.size())}, torch::kFloat).clone();
  // OK(torch-non-blocking-pageable): pinned before the asynchronous upload.
  auto obs = buffer.observations().pin_memory().to(device, /*non_blocking=*/true);
  auto actions = buffer.actions().to(device);
  opt.zero_grad();
  auto logp = torch::log_softmax(policy->forward(obs), -1).gather(1, actions.unsqueeze(1)).squeeze(1);
  // OK(torch-device-mismatch): the returns and their mean are both on the host.
  auto advantage = returns - returns.mean();
  // BUG(torch-device-mismatch): logp is on 'device', the per-step advantages
  // were built on the host and never moved.
  auto loss = -(logp * advantage).mean();
  loss.backward();
  opt.step();
  if (iter % 20 == 0) {
    // OK(torch-host-sync-in-loop): update() runs every iteration, but this
    // read only every 20th.
    return loss.item<double>();
  }
  return 0.0;
}

// Only called under the NoGradGuard in main().
double greedy_return(torch::nn::Sequential &policy, Corridor &env, torch::Device device) {
  auto obs = env.reset();
  double total = 0.0;
  for (int64_t t = 0; t < 50; ++t) {
    // OK(torch-inference-without-no-grad): main() holds a NoGradGuard.
    auto best = policy->forward(obs.to(device)).argmax(-1);
    auto host = best.to(torch::kCPU, /*non_blocking=*/true);
    if (device.is_cuda())
      torch::cuda::synchronize();
    // OK(torch-non-blocking-d2h-race): synchronised above.
    const int64_t a = host.item<int64_t>();
    bool done = false;
    total += env.step(a, done);
    if (done)
      break;
    obs = env.observe();
  }
  return total;
}

int main() {
  torch::manual_seed(3);
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  auto policy = make_policy();
  policy->to(device);
  torch::optim::Adam opt(policy->parameters(), torch::optim::AdamOptions(1e-2));
  Corridor env;
  ReplayBuffer buffer;
  collect(policy, env, buffer, device, 4000);
  for (int64_t iter = 0; iter < 300; ++iter) {
    const double l = update(policy, opt, buffer, device, iter);
    if (iter % 20 == 0)
      std::cout << "iter " << iter << " loss " << l << '\n';
  }
  torch::NoGradGuard no_grad;
  Corridor eval_env;
  std::cout << "greedy return " << greedy_return(policy, eval_env, device) << '\n';
  return 0;
}
