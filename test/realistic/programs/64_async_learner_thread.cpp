// An actor-learner DQN on a toy grid world in one process: the main thread
// acts with an epsilon-greedy copy of the network and pushes transitions
// into a mutex-protected replay buffer; a learner thread samples batches,
// trains the online network and refreshes the target network every few
// hundred updates. Learner statistics live in a struct the main thread
// prints at the end.
#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

constexpr int64_t kObs = 16;
constexpr int64_t kActions = 4;

torch::nn::Sequential make_qnet() {
  return torch::nn::Sequential(torch::nn::Linear(kObs, 64), torch::nn::ReLU(), torch::nn::Linear(64, 64),
                               torch::nn::ReLU(), torch::nn::Linear(64, kActions));
}

struct Transition {
  torch::Tensor obs, next_obs;
  int64_t action;
  float reward;
  bool done;
};

struct Batch {
  torch::Tensor obs, next_obs, actions, rewards, dones;
};

class SharedReplay {
 public:
  explicit SharedReplay(size_t capacity) : capacity_(capacity) {}

  void push(Transition t) {
    std::lock_guard<std::mutex> lock(mu_);
    if (items_.size() == capacity_)
      items_.pop_front();
    items_.push_back(std::move(t));
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return items_.size();
  }

  // Uniform sample, stacked on the host.
  Batch sample(int64_t n, std::mt19937 &rng) {
    std::lock_guard<std::mutex> lock(mu_);
    std::uniform_int_distribution<size_t> pick(0, items_.size() - 1);
    std::vector<torch::Tensor> obs, next;
    std::vector<int64_t> actions;
    std::vector<float> rewards, dones;
    for (int64_t i = 0; i < n; ++i) {
      const auto &t = items_[pick(rng)];
      obs.push_back(t.obs);
      next.push_back(t.next_obs);
      actions.push_back(t.action);
      rewards.push_back(t.reward);
      dones.push_back(t.done ? 1.0f : 0.0f);
    }
    return {torch::stack(obs), torch::stack(next), torch::tensor(actions, torch::kLong), torch::tensor(rewards),
            torch::tensor(dones)};
  }

 private:
  std::mutex mu_;
  std::deque<Transition> items_;
  size_t capacity_;
};

struct LearnerStats {
  int64_t updates = 0;
  torch::Tensor loss_sum;  // on the training device, set before the learner starts
  float last_td = 0.0f;
};

class GridWorld {
 public:
  torch::Tensor reset() {
    pos_ = 0;
    return observe();
  }
  float step(int64_t a, bool &done) {
    const int64_t moves[kActions] = {-4, 4, -1, 1};
    pos_ = std::clamp<int64_t>(pos_ + moves[a], 0, kObs - 1);
    done = pos_ == kObs - 1 || ++t_ % 64 == 0;
    return pos_ == kObs - 1 ? 1.0f : -0.01f;
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

int main() {
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  auto online = make_qnet();
  auto target = make_qnet();
  online->to(device);
  target->to(device);
  torch::optim::Adam opt(online->parameters(), torch::optim::AdamOptions(5e-4));
  SharedReplay replay(50000);
  LearnerStats stats;
  stats.loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
  std::atomic<bool> stop{false};
  std::mutex weights_mu;

  auto learner = [&] {
    std::mt19937 rng(7);
    const float gamma = 0.99f;
    while (!stop.load()) {
      if (replay.size() < 1000) {
        std::this_thread::yield();
        continue;
      }
      auto batch = replay.sample(128, rng);
      // BUG(torch-non-blocking-pageable): the sampled batch was stacked in
      // pageable host memory; the flag does not make this copy asynchronous.
      auto obs = batch.obs.to(device, /*non_blocking=*/true);
      auto next_obs = batch.next_obs.to(device);
      auto actions = batch.actions.to(device);
      torch::Tensor next_q;
      {
        torch::NoGradGuard no_grad;
        // OK(torch-inference-without-no-grad): the target network runs under
        // a NoGradGuard inside the training loop.
        next_q = std::get<0>(target->forward(next_obs).max(1));
      }
      std::lock_guard<std::mutex> lock(weights_mu);
      auto q = online->forward(obs).gather(1, actions.unsqueeze(1)).squeeze(1);
      // BUG(torch-device-mismatch): next_q is on 'device', the rewards and
      // done flags of the sampled batch never left the host.
      auto td_target = batch.rewards + gamma * (1 - batch.dones) * next_q;
      auto td_error = q - td_target;
      auto loss = td_error.pow(2).mean();
      opt.zero_grad();
      loss.backward();
      opt.step();
      // BUG(torch-loss-accumulation-graph): the learner keeps every update's
      // graph alive through the running sum in the shared statistics.
      stats.loss_sum += loss;
      // BUG(torch-host-sync-in-loop): one device round trip per update just to
      // remember the latest TD error.
      stats.last_td = td_error.abs().mean().item<float>();
      if (++stats.updates % 250 == 0) {
        torch::NoGradGuard no_grad;
        auto src = online->parameters();
        auto dst = target->parameters();
        for (size_t i = 0; i < src.size(); ++i)
          dst[i].copy_(src[i]);
      }
    }
  };
  std::thread learner_thread(learner);

  GridWorld env;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> coin(0.0f, 1.0f);
  auto obs = env.reset();
  for (int64_t step = 0; step < 200000; ++step) {
    const float eps = std::max(0.05f, 1.0f - static_cast<float>(step) / 50000.0f);
    int64_t action;
    if (coin(rng) < eps) {
      action = static_cast<int64_t>(coin(rng) * kActions) % kActions;
    } else {
      torch::NoGradGuard no_grad;
      std::lock_guard<std::mutex> lock(weights_mu);
      // OK(torch-inference-without-no-grad): acting runs under a NoGradGuard.
      action = online->forward(obs.to(device).unsqueeze(0)).argmax(1).item<int64_t>();
    }
    bool done = false;
    const float r = env.step(action, done);
    auto next = env.observe();
    replay.push({obs, next, action, r, done});
    obs = done ? env.reset() : next;
  }
  stop = true;
  learner_thread.join();
  // OK(torch-host-sync-in-loop): read once, after the learner has stopped.
  std::cout << "updates " << stats.updates << " mean loss " << (stats.loss_sum / std::max<int64_t>(1, stats.updates)).item<float>()
            << "\n";
  return 0;
}
