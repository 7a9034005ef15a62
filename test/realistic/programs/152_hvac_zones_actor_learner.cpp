// Advantage actor-critic for thermostat set-points in 32 simulated office
// buildings at once (one action per building: lower, hold or raise the
// set-point). Actor and learner live on different cards when there are two:
// the actor copy collects rollouts without gradients, the learner trains and
// its weights are synced back through a template helper. The trunk is an
// AnyModule chosen by name, and progress goes to a std::function reporter.
#include <torch/torch.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

constexpr int64_t kBuildings = 32;
constexpr int64_t kObs = 12;  // zone temps, outside temp, occupancy, hour
constexpr int64_t kActions = 3;
// The greedy evaluator gets the second card so it never stalls the actor.
// BUG(torch-device-index-unchecked): ordinal 1 is never compared with
// torch::cuda::device_count(); single-GPU nodes have no "cuda:1".
constexpr const char *kEvalDevice = "cuda:1";

class ZoneSim {
 public:
  ZoneSim() : temps_(kBuildings * kObs, 21.0f), rng_(3) {}
  std::vector<float> observe() const { return temps_; }
  // Applies the set-point moves, returns comfort-minus-energy rewards.
  torch::Tensor step(const torch::Tensor &actions) {
    auto a = actions.accessor<int64_t, 1>();
    std::normal_distribution<float> weather(0.0f, 0.3f);
    auto rewards = torch::zeros({kBuildings});
    for (int64_t b = 0; b < kBuildings; ++b) {
      float &t = temps_[static_cast<size_t>(b * kObs)];
      t += static_cast<float>(a[b] - 1) * 0.5f + weather(rng_);
      rewards[b] = -std::abs(t - 21.5f) - 0.1f * static_cast<float>(a[b] != 1);
    }
    return rewards;
  }

 private:
  std::vector<float> temps_;
  std::mt19937 rng_;
};

struct ShallowTrunkImpl : torch::nn::Module {
  explicit ShallowTrunkImpl(int64_t hidden) : fc(register_module("fc", torch::nn::Linear(kObs, hidden))) {}
  torch::Tensor forward(torch::Tensor x) { return torch::tanh(fc->forward(x)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(ShallowTrunk);

struct DeepTrunkImpl : torch::nn::Module {
  explicit DeepTrunkImpl(int64_t hidden)
      : fc1(register_module("fc1", torch::nn::Linear(kObs, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, hidden))) {}
  torch::Tensor forward(torch::Tensor x) { return torch::tanh(fc2->forward(torch::tanh(fc1->forward(x)))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(DeepTrunk);

torch::nn::AnyModule make_trunk(const std::string &kind, int64_t hidden) {
  if (kind == "deep")
    return torch::nn::AnyModule(DeepTrunk(hidden));
  return torch::nn::AnyModule(ShallowTrunk(hidden));
}

struct ActorCriticImpl : torch::nn::Module {
  ActorCriticImpl(const std::string &kind, int64_t hidden)
      : trunk(make_trunk(kind, hidden)),
        pi(register_module("pi", torch::nn::Linear(hidden, kActions))),
        v(register_module("v", torch::nn::Linear(hidden, 1))) {
    register_module("trunk", trunk.ptr());
  }
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor obs) {
    auto h = trunk.forward(obs);
    return {pi->forward(h), v->forward(h)};
  }
  torch::Tensor policy(torch::Tensor obs) { return pi->forward(trunk.forward(obs)); }

  torch::nn::AnyModule trunk;
  torch::nn::Linear pi, v;
};
TORCH_MODULE(ActorCritic);

struct Placement {
  torch::Device actor{torch::kCPU};
  torch::Device learner{torch::kCPU};
};

Placement plan_placement(int64_t learner_ordinal) {
  Placement p;
  if (!torch::cuda::is_available())
    return p;
  p.actor = torch::Device(torch::kCUDA, 0);
  p.learner = p.actor;
  // OK(torch-device-index-unchecked): the learner's ordinal is compared with
  // the device count before it is used.
  if (learner_ordinal < static_cast<int64_t>(torch::cuda::device_count()))
    p.learner = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(learner_ordinal));
  return p;
}

struct Rollout {
  torch::Tensor obs;      // [T, B, kObs]
  torch::Tensor actions;  // [T, B]
  torch::Tensor rewards;  // [T, B]
};

Rollout collect(ActorCritic &actor, ZoneSim &sim, torch::Device device, int64_t horizon) {
  torch::NoGradGuard no_grad;
  Rollout r{torch::empty({horizon, kBuildings, kObs}, torch::TensorOptions().pinned_memory(device.is_cuda())),
            torch::zeros({horizon, kBuildings}, torch::kLong), torch::zeros({horizon, kBuildings})};
  for (int64_t t = 0; t < horizon; ++t) {
    std::vector<float> raw = sim.observe();
    auto obs_host = torch::from_blob(raw.data(), {kBuildings, kObs}, torch::kFloat);
    r.obs[t].copy_(obs_host);
    // BUG(torch-non-blocking-pageable): obs_host wraps a std::vector; the
    // "non-blocking" upload from pageable memory is synchronous.
    auto obs = obs_host.to(device, /*non_blocking=*/true);
    auto probs = torch::softmax(actor->policy(obs), -1);
    auto actions = torch::multinomial(probs, 1).squeeze(1).to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): the simulator reads the actions
    // before the copy back from the actor's device has finished.
    auto rewards = sim.step(actions);
    r.actions[t].copy_(actions);
    r.rewards[t].copy_(rewards);
  }
  return r;
}

torch::Tensor discounted_returns(const torch::Tensor &rewards, double gamma) {
  auto out = torch::zeros_like(rewards);
  auto running = torch::zeros({rewards.size(1)});
  for (int64_t t = rewards.size(0) - 1; t >= 0; --t) {
    running = rewards[t] + gamma * running;
    out[t] = running;
  }
  return out;
}

template <typename Net>
void sync_weights(Net &dst, Net &src) {
  torch::NoGradGuard no_grad;
  auto to = dst->parameters();
  auto from = src->parameters();
  for (size_t i = 0; i < to.size(); ++i)
    to[i].copy_(from[i]);
}

int main(int argc, char **argv) {
  torch::manual_seed(5);
  const std::string kind = argc > 1 ? argv[1] : "shallow";
  const int64_t learner_gpu = argc > 2 ? std::atoi(argv[2]) : 1;
  const Placement place = plan_placement(learner_gpu);

  ActorCritic learner(kind, 128), actor(kind, 128);
  learner->to(place.learner);
  actor->to(place.actor);
  sync_weights(actor, learner);
  torch::optim::RMSprop opt(learner->parameters(), torch::optim::RMSpropOptions(7e-4));

  std::function<void(int64_t, double)> report = [](int64_t iter, double mean_reward) {
    std::cout << "iter " << iter << " mean reward " << mean_reward << "\n";
  };

  ZoneSim sim;
  for (int64_t iter = 0; iter < 3000; ++iter) {
    Rollout rollout = collect(actor, sim, place.actor, 64);
    auto returns = discounted_returns(rollout.rewards, 0.99);

    auto obs = rollout.obs.to(place.learner).flatten(0, 1);
    auto acts = rollout.actions.to(place.learner).flatten();
    auto [logits, values] = learner->forward(obs);
    auto logp = torch::log_softmax(logits, -1).gather(1, acts.unsqueeze(1)).squeeze(1);
    // BUG(torch-device-mismatch): the returns were computed on the host from
    // the rollout and never moved; the critic's values are on the learner.
    auto adv = returns.flatten() - values.squeeze(1);
    auto loss = -(logp * adv.detach()).mean() + 0.5 * adv.pow(2).mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
    sync_weights(actor, learner);

    if (iter % 50 == 0)
      // OK(torch-host-sync-in-loop): every 50th iteration, on host rewards.
      report(iter, rollout.rewards.mean().item<double>());
  }

  // Greedy evaluation on a separate replica.
  torch::Device eval_device = torch::cuda::is_available() ? torch::Device(kEvalDevice) : torch::Device(torch::kCPU);
  ActorCritic evaluator(kind, 128);
  evaluator->to(eval_device);
  sync_weights(evaluator, learner);
  torch::NoGradGuard no_grad;
  ZoneSim eval_sim;
  double total = 0.0;
  for (int64_t t = 0; t < 96; ++t) {
    std::vector<float> raw = eval_sim.observe();
    auto obs = torch::from_blob(raw.data(), {kBuildings, kObs}, torch::kFloat).to(eval_device);
    // OK(torch-non-blocking-d2h-race): a blocking copy back to the host.
    auto greedy = evaluator->policy(obs).argmax(-1).to(torch::kCPU);
    total += eval_sim.step(greedy).mean().item<double>();
  }
  std::cout << "greedy mean reward " << total / 96.0 << "\n";
  return 0;
}
