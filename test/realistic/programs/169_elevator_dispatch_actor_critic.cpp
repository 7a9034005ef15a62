// Elevator group dispatch: an actor-critic assigns every new hall call to one
// of four cars in a simulated 12-floor office building. The simulator runs on
// the host; the policy and the value network run on the accelerator with an
// optimizer each. A rollout comes back as a tuple (unpacked with structured
// bindings), the metric hooks are lambdas kept in a std::map member of the
// learner, and the critic accumulates its gradients over kCriticAccum
// rollouts before it steps.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

constexpr int64_t kFloors = 12, kCars = 4, kObs = kCars * 2 + 2, kHorizon = 64, kCriticAccum = 4;

// Cars move one floor per tick towards their next stop; the reward is minus
// the waiting time of the calls served.
class Building {
 public:
  Building() : pos_(kCars, 0), load_(kCars, 0) {}

  torch::Tensor observe() {
    call_floor_ = std::uniform_int_distribution<int>(0, kFloors - 1)(rng_);
    std::vector<float> obs;
    for (int c = 0; c < kCars; ++c) {
      obs.push_back(static_cast<float>(pos_[c]) / kFloors);
      obs.push_back(static_cast<float>(load_[c]) / 8.0f);
    }
    obs.push_back(static_cast<float>(call_floor_) / kFloors);
    obs.push_back(static_cast<float>(tick_ % 96) / 96.0f);
    return torch::tensor(obs);
  }

  float assign(int64_t car) {
    const int wait = std::abs(pos_[car] - call_floor_) + 2 * load_[car];
    pos_[car] = call_floor_;
    load_[car] = std::min(load_[car] + 1, 8);
    for (int c = 0; c < kCars; ++c)
      if (load_[c] > 0 && (tick_ + c) % 3 == 0)
        --load_[c];
    ++tick_;
    return -static_cast<float>(wait);
  }

 private:
  std::mt19937 rng_{169};
  std::vector<int> pos_, load_;
  int call_floor_ = 0;
  int64_t tick_ = 0;
};

torch::nn::Sequential mlp(int64_t out) {
  return torch::nn::Sequential(torch::nn::Linear(kObs, 128), torch::nn::Tanh(), torch::nn::Linear(128, 128),
                               torch::nn::Tanh(), torch::nn::Linear(128, out));
}

struct Metrics {
  int iteration;
  torch::Tensor actor_loss, critic_loss, entropy;
};

class Learner {
 public:
  explicit Learner(torch::Device device)
      : device_(device), actor_(mlp(kCars)), critic_(mlp(1)),
        actor_opt_(actor_->parameters(), torch::optim::AdamOptions(3e-4)),
        critic_opt_(critic_->parameters(), torch::optim::AdamOptions(1e-3)) {
    actor_->to(device_);
    critic_->to(device_);
    hooks_["console"] = [](const Metrics &m) {
      if (m.iteration % 20 == 0)
        // OK(torch-host-sync-in-loop): every 20th update.
        std::cout << "iter " << m.iteration << " actor " << m.actor_loss.item<float>() << "\n";
    };
    hooks_["history"] = [this](const Metrics &m) {
      // BUG(torch-host-sync-in-loop): update() runs every hook after every
      // update, and the critic loss lives on device_.
      critic_history_.push_back(m.critic_loss.item<float>());
    };
  }

  // obs [T, kObs] and actions [T] on device_, rewards on the host.
  std::tuple<torch::Tensor, torch::Tensor, std::vector<float>> rollout(Building &building, int64_t steps) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> observations;
    std::vector<int64_t> actions;
    std::vector<float> rewards;
    for (int64_t t = 0; t < steps; ++t) {
      auto obs = building.observe().to(device_);
      // OK(torch-inference-without-no-grad): the rollout holds a NoGradGuard.
      auto probs = torch::softmax(actor_->forward(obs.unsqueeze(0)), -1);
      auto car = torch::multinomial(probs, 1).view({1});
      auto car_host = car.to(torch::kCPU, /*non_blocking=*/true);
      // BUG(torch-non-blocking-d2h-race): the simulator reads the chosen car
      // before the asynchronous copy has landed.
      const int64_t chosen = car_host.item<int64_t>();
      rewards.push_back(building.assign(chosen));
      observations.push_back(obs);
      actions.push_back(chosen);
    }
    return {torch::stack(observations),
            torch::tensor(actions, torch::TensorOptions().dtype(torch::kLong)).to(device_), rewards};
  }

  void update(Building &building, int iteration) {
    auto [obs, actions, rewards] = rollout(building, kHorizon);
    std::vector<float> returns(rewards.size());
    float running = 0.0f;
    for (size_t i = rewards.size(); i-- > 0;) {
      running = rewards[i] + 0.97f * running;
      returns[i] = running / 10.0f;
    }
    auto ret = torch::from_blob(returns.data(), {static_cast<int64_t>(returns.size())}, torch::kFloat).clone();
    auto values = critic_->forward(obs).squeeze(-1);
    // BUG(torch-device-mismatch): the returns were built on the host, the
    // critic's values are on device_.
    auto advantage = ret - values.detach();
    // OK(torch-device-mismatch): here the returns are moved first.
    auto critic_loss = (ret.to(device_) - values).pow(2).mean();
    (critic_loss / static_cast<double>(kCriticAccum)).backward();
    if (++critic_pending_ == kCriticAccum) {
      critic_opt_.step();
      critic_opt_.zero_grad();
      critic_pending_ = 0;
    }

    auto logp_all = torch::log_softmax(actor_->forward(obs), -1);
    auto logp = logp_all.gather(1, actions.unsqueeze(1)).squeeze(1);
    auto entropy = -(logp_all.exp() * logp_all).sum(-1).mean();
    auto actor_loss = -(logp * advantage).mean() - entropy_coef_ * entropy;
    actor_loss.backward();
    actor_opt_.step();
    actor_opt_.zero_grad();
    // BUG(torch-host-sync-in-loop): the entropy check reads a device scalar
    // after every update to adapt the bonus.
    if (entropy.item<float>() < 0.4f)
      entropy_coef_ = std::min(entropy_coef_ * 1.05, 0.1);

    Metrics m{iteration, actor_loss.detach(), critic_loss.detach(), entropy.detach()};
    for (auto &[name, hook] : hooks_)
      hook(m);
  }

  // Greedy dispatch for the weekly report.
  double greedy_wait(Building &building, int64_t calls) {
    torch::NoGradGuard no_grad;
    double total = 0.0;
    for (int64_t i = 0; i < calls; ++i) {
      auto obs = building.observe().unsqueeze(0);
      // BUG(torch-tensor-to-discarded): Tensor::to returns the moved copy;
      // `obs` itself stays on the CPU.
      obs.to(device_);
      // BUG(torch-device-mismatch): so the actor on device_ gets a CPU input.
      auto car = actor_->forward(obs).argmax(-1).item<int64_t>();
      total -= building.assign(car);
    }
    return total / static_cast<double>(calls);
  }

  const std::vector<float> &critic_history() const { return critic_history_; }

 private:
  torch::Device device_;
  torch::nn::Sequential actor_, critic_;
  torch::optim::Adam actor_opt_, critic_opt_;
  std::map<std::string, std::function<void(const Metrics &)>> hooks_;
  std::vector<float> critic_history_;
  int64_t critic_pending_ = 0;
  double entropy_coef_ = 0.01;
};

int main() {
  torch::manual_seed(169);
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Learner learner(device);
  Building building;
  for (int iteration = 0; iteration < 2000; ++iteration)
    learner.update(building, iteration);
  Building report_day;
  std::cout << "mean wait (floors): " << learner.greedy_wait(report_day, 500) << "\n";
  std::cout << "critic losses recorded: " << learner.critic_history().size() << "\n";
  return 0;
}
