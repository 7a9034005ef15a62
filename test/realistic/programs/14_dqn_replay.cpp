// DQN with a replay buffer and a target network cloned from the online one.
// Transitions are stored on the host; learning happens on 'device'.
#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <iostream>
#include <random>
#include <vector>

struct Transition {
  torch::Tensor state;
  torch::Tensor next_state;
  int64_t action;
  float reward;
  float done;
};

class ReplayBuffer {
 public:
  explicit ReplayBuffer(size_t capacity) : capacity_(capacity) {}
  void push(Transition t) {
    if (items_.size() == capacity_)
      items_.pop_front();
    items_.push_back(std::move(t));
  }
  std::vector<Transition> sample(size_t n, std::mt19937 &rng) const {
    std::uniform_int_distribution<size_t> pick(0, items_.size() - 1);
    std::vector<Transition> out;
    for (size_t i = 0; i < n; ++i)
      out.push_back(items_[pick(rng)]);
    return out;
  }
  size_t size() const { return items_.size(); }

 private:
  size_t capacity_;
  std::deque<Transition> items_;
};

struct QNetImpl : torch::nn::Cloneable<QNetImpl> {
  QNetImpl(int64_t obs, int64_t actions) : obs_(obs), actions_(actions) { reset(); }
  void reset() override {
    fc1 = register_module("fc1", torch::nn::Linear(obs_, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, actions_));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
  int64_t obs_, actions_;
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(QNet);

class Agent {
 public:
  Agent(int64_t obs, int64_t actions, torch::Device device)
      : device_(device), obs_(obs), actions_(actions), q_(obs, actions), rng_(3) {
    q_->to(device_);
    target_ = std::dynamic_pointer_cast<QNetImpl>(q_->clone());
    opt_ = std::make_unique<torch::optim::Adam>(q_->parameters(), torch::optim::AdamOptions(1e-3));
  }

  int64_t act(const torch::Tensor &state, double eps) {
    std::uniform_real_distribution<double> coin(0, 1);
    if (coin(rng_) < eps)
      return std::uniform_int_distribution<int64_t>(0, actions_ - 1)(rng_);
    torch::NoGradGuard no_grad;
    return q_->forward(state.to(device_).unsqueeze(0)).argmax(1).item<int64_t>();
  }

  void learn(const ReplayBuffer &buffer) {
    auto batch = buffer.sample(64, rng_);
    std::vector<torch::Tensor> s, ns;
    std::vector<int64_t> a;
    std::vector<float> r, d;
    for (const auto &t : batch) {
      s.push_back(t.state);
      ns.push_back(t.next_state);
      a.push_back(t.action);
      r.push_back(t.reward);
      d.push_back(t.done);
    }
    auto q = q_->forward(torch::stack(s).to(device_))
                 .gather(1, torch::tensor(a, torch::kLong).to(device_).unsqueeze(1))
                 .squeeze(1);
    torch::Tensor target;
    {
      torch::NoGradGuard no_grad;
      // OK(torch-device-mismatch): clone() kept the target network on 'device'.
      auto next_q = std::get<0>(target_->forward(torch::stack(ns).to(device_)).max(1));
      target = torch::tensor(r).to(device_) + 0.99 * next_q * (1 - torch::tensor(d).to(device_));
    }
    auto td = q - target;
    auto loss = torch::smooth_l1_loss(q, target);
    opt_->zero_grad();
    loss.backward();
    opt_->step();
    // BUG(torch-host-sync-in-loop): learn() runs once per environment step
    // of main()'s training loop; this .item() drains the GPU every time.
    td_log_.push_back(td.abs().mean().item<double>());
  }

  // Diagnostics: the mean Q-value over random probe observations.
  double mean_q(int64_t probes) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> states;
    for (int64_t i = 0; i < probes; ++i)
      states.push_back(torch::randn({obs_}));
    auto stacked = torch::stack(states);
    // BUG(torch-device-mismatch): the probe states are host tensors; q_ is
    // on 'device'.
    auto q = q_->forward(stacked);
    return std::get<0>(q.max(1)).mean().item<double>();
  }

  void sync_target() { target_ = std::dynamic_pointer_cast<QNetImpl>(q_->clone()); }
  const std::vector<double> &td_log() const { return td_log_; }

 private:
  torch::Device device_;
  int64_t obs_;
  int64_t actions_;
  QNet q_;
  std::shared_ptr<QNetImpl> target_;
  std::unique_ptr<torch::optim::Adam> opt_;
  std::mt19937 rng_;
  std::vector<double> td_log_;
};

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  const int64_t obs = 8, actions = 4;
  Agent agent(obs, actions, device);
  ReplayBuffer buffer(10000);
  auto state = torch::randn({obs});
  int64_t env_steps = 0;
  for (int64_t iteration = 0; iteration < 100; ++iteration) {
    // Collect: act in the environment for a while.
    for (int64_t i = 0; i < 100; ++i, ++env_steps) {
      double eps = std::max(0.05, 1.0 - static_cast<double>(env_steps) / 2000.0);
      int64_t action = agent.act(state, eps);
      auto next_state = torch::randn({obs});
      buffer.push({state, next_state, action, action == 0 ? 1.0f : 0.0f, i == 99 ? 1.0f : 0.0f});
      state = next_state;
    }
    // Update: a fixed number of gradient steps per iteration.
    for (int64_t k = 0; k < 50; ++k)
      agent.learn(buffer);
    if (iteration % 10 == 0)
      agent.sync_target();
  }
  std::cout << "mean Q " << agent.mean_q(256) << ", " << agent.td_log().size() << " updates\n";
  return 0;
}
