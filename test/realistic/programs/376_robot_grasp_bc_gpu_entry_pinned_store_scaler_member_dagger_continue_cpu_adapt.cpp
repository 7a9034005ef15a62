// Robot grasping: a goal-conditioned MLP policy predicts chunks of joint
// deltas for a 7-DoF arm. It is behaviour-cloned from teleoperated demos kept
// pinned in host memory, refined by DAgger rounds in which a scripted IK
// expert relabels the states the policy visited, checked by simulated
// rollouts, and finally adapted on the robot's own CPU. LibTorch 1.13/2.x.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace grasp {

constexpr int64_t kJoints = 7, kGoal = 3, kObs = 2 * kJoints + kGoal, kChunk = 4;

struct PolicyImpl : nn::Module {
  PolicyImpl()
      : body(register_module("body", nn::Sequential(nn::Linear(kObs, 256), nn::LayerNorm(nn::LayerNormOptions({256})),
                                                    nn::SiLU(), nn::Linear(256, 256), nn::SiLU()))),
        head(register_module("head", nn::Linear(256, kChunk * kJoints))) {}
  torch::Tensor forward(const torch::Tensor &obs) {
    return torch::tanh(head->forward(body->forward(obs))).view({-1, kChunk, kJoints});
  }
  nn::Sequential body;
  nn::Linear head;
};
TORCH_MODULE(Policy);

struct DemoBatch {
  torch::Tensor obs;      // B x kObs: q, qdot, goal position
  torch::Tensor actions;  // B x kChunk x kJoints, radians
};

std::vector<DemoBatch> load_demos(int64_t batches, int64_t b) {
  std::vector<DemoBatch> out;
  for (int64_t i = 0; i < batches; ++i)
    out.push_back({torch::randn({b, kObs}), 0.3 * torch::randn({b, kChunk, kJoints})});
  return out;
}

// The whole demo set, copied once into page-locked memory.
class PinnedDemoStore {
 public:
  explicit PinnedDemoStore(std::vector<DemoBatch> demos) : batches_(std::move(demos)) {
    for (auto &b : batches_) {
      b.obs = b.obs.pin_memory();
      // BUG(torch-tensor-to-discarded): the pinned copy of the actions is dropped; they stay pageable.
      b.actions.pin_memory();
    }
  }
  const DemoBatch &batch(size_t i) const { return batches_[i]; }
  size_t size() const { return batches_.size(); }

 private:
  std::vector<DemoBatch> batches_;
};

class ObsNormalizer {
 public:
  void fit(const PinnedDemoStore &store) {
    std::vector<torch::Tensor> all;
    for (size_t i = 0; i < store.size(); ++i) all.push_back(store.batch(i).obs);
    auto stacked = torch::cat(all);
    mean_ = stacked.mean(0);
    std_ = stacked.std(0).clamp_min(1e-3);
  }
  torch::Tensor operator()(const torch::Tensor &obs) const {
    // OK(torch-device-mismatch): the statistics are moved to the observation's device.
    return (obs - mean_.to(obs.device())) / std_.to(obs.device());
  }

 private:
  torch::Tensor mean_, std_;
};

// Joint limits of the arm; actions are learnt in [-1, 1].
class ActionScaler {
 public:
  ActionScaler() : limits_(torch::tensor({2.9, 1.8, 2.9, 3.1, 2.9, 3.8, 2.9})) {}
  torch::Tensor normalize(const torch::Tensor &a) const { return a / limits_; }

 private:
  torch::Tensor limits_;
};

struct Relabelled {
  torch::Tensor obs, expert;  // expert chunk, already normalised by the IK solver
  bool converged;
};

class BcTrainer {
 public:
  BcTrainer(Policy policy, torch::Device device, int64_t log_every)
      : policy_(std::move(policy)), device_(device), log_every_(log_every),
        opt_(policy_->parameters(), torch::optim::AdamWOptions(3e-4).weight_decay(1e-4)) {}

  void fit_demos(const PinnedDemoStore &store, ObsNormalizer &norm, int epochs) {
    int64_t step = 0;
    for (int e = 0; e < epochs; ++e) {
      for (size_t i = 0; i < store.size(); ++i) {
        const DemoBatch &b = store.batch(i);
        // OK(torch-non-blocking-pageable): the observations were pinned by the store.
        auto obs = norm(b.obs.to(device_, /*non_blocking=*/true));
        // BUG(torch-non-blocking-pageable): the actions' pinned copy was discarded, so this copy is synchronous.
        auto raw = b.actions.to(device_, /*non_blocking=*/true);
        // BUG(torch-device-mismatch): the scaler's joint limits stay on the host; raw is on the GPU.
        auto target = scaler_.normalize(raw);
        opt_.zero_grad();
        auto loss = F::mse_loss(policy_->forward(obs), target);
        loss.backward();
        opt_.step();
        // BUG(torch-loss-accumulation-graph): the plateau window keeps the last 50 steps' graphs alive.
        recent_.push_back(loss);
        if (recent_.size() > 50) recent_.pop_front();
        // OK(torch-host-sync-in-loop): read only every log_every_ steps.
        if (++step % log_every_ == 0)
          std::cout << "bc step " << step << " loss " << loss.item<double>() << '\n';
      }
      std::vector<torch::Tensor> window(recent_.begin(), recent_.end());
      std::cout << "epoch " << e << " window loss " << torch::stack(window).mean().item<double>() << '\n';
    }
  }

  // One DAgger round over the states the policy visited.
  double fit_relabelled(const std::vector<Relabelled> &data, ObsNormalizer &norm) {
    auto agreement = torch::zeros({}, torch::TensorOptions().device(device_));
    int64_t counted = 0;
    opt_.zero_grad();
    for (const auto &r : data) {
      auto pred = policy_->forward(norm(r.obs.to(device_)));
      auto target = r.expert.to(device_);
      auto loss = F::smooth_l1_loss(pred, target);
      loss.backward();
      nn::utils::clip_grad_norm_(policy_->parameters(), 1.0);
      // BUG(torch-missing-zero-grad): an unconverged label skips the zero_grad() below via continue.
      opt_.step();
      if (!r.converged) continue;  // only converged IK labels count toward agreement
      // OK(torch-loss-accumulation-graph): a count of comparisons on the detached prediction.
      agreement += (pred.detach() - target).abs().lt(0.05).all(2).sum();
      counted += pred.size(0) * kChunk;
      opt_.zero_grad();
    }
    return counted ? agreement.item<double>() / static_cast<double>(counted) : 0.0;
  }

  Policy policy() const { return policy_; }

 private:
  Policy policy_;
  torch::Device device_;
  int64_t log_every_;
  torch::optim::AdamW opt_;
  ActionScaler scaler_;
  std::deque<torch::Tensor> recent_;
};

// Scripted expert: damped least-squares IK toward the goal, on the host. It
// gives up on goals outside the workspace.
Relabelled ik_expert(const torch::Tensor &obs) {
  auto q = obs.narrow(1, 0, kJoints), goal = obs.narrow(1, 2 * kJoints, kGoal);
  auto err = goal.norm(2, 1, true) - q.abs().sum(1, true) / kJoints;
  auto step = torch::tanh(err).unsqueeze(1).expand({-1, kChunk, kJoints}).contiguous();
  const bool converged = goal.norm(2, 1).max().item<double>() < 1.5;
  return {obs, step, converged};
}

// Rolls the policy out in a kinematic simulator; only called under no-grad.
std::vector<torch::Tensor> simulate(Policy &policy, ObsNormalizer &norm, const torch::Tensor &goals, int64_t ticks) {
  auto q = torch::zeros({goals.size(0), kJoints}, goals.options());
  auto qd = torch::zeros_like(q);
  std::vector<torch::Tensor> visited;
  for (int64_t t = 0; t < ticks; ++t) {
    // OK(torch-device-mismatch): q and qd were made with the goals' options.
    auto obs = torch::cat({q, qd, goals}, 1);
    // OK(torch-inference-without-no-grad, torch-eval-mode-missing): the caller holds a NoGradGuard, and
    // the policy has no dropout or batch norm.
    auto chunk = policy->forward(norm(obs));
    qd = chunk.select(1, 0);
    q = q + 0.05 * qd;
    if (t % 10 == 0) visited.push_back(obs.cpu());
  }
  return visited;
}

std::vector<Relabelled> collect_dagger_states(Policy &policy, ObsNormalizer &norm, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto goals = torch::rand({32, kGoal}, torch::TensorOptions().device(device));
  std::vector<Relabelled> out;
  for (const auto &obs : simulate(policy, norm, goals, 100)) out.push_back(ik_expert(obs));
  return out;
}

// Adaptation on the robot itself: CPU only, a few hundred steps.
void adapt_on_robot(Policy policy, ObsNormalizer &norm) {
  policy->to(torch::kCPU);
  torch::optim::SGD opt(policy->parameters(), torch::optim::SGDOptions(1e-4).momentum(0.9));
  double ep_loss = 0.0;
  for (int step = 0; step < 200; ++step) {
    auto obs = torch::randn({16, kObs});
    auto target = 0.1 * torch::randn({16, kChunk, kJoints});
    opt.zero_grad();
    auto loss = F::mse_loss(policy->forward(norm(obs)), target);
    loss.backward();
    opt.step();
    // OK(torch-loss-accumulation-graph, torch-host-sync-in-loop): item() of a CPU loss adds a double, no graph.
    ep_loss += loss.item<double>();
  }
  std::cout << "on-robot adaptation loss " << ep_loss / 200.0 << '\n';
}

void run_gpu_training() {
  // OK(torch-cuda-unguarded): main returns before calling this when CUDA is unavailable.
  torch::Device device(torch::kCUDA);
  PinnedDemoStore store(load_demos(60, 128));
  ObsNormalizer norm;
  norm.fit(store);
  Policy policy;
  policy->to(device);
  BcTrainer trainer(policy, device, 25);
  trainer.fit_demos(store, norm, 3);
  for (int round = 0; round < 3; ++round) {
    auto states = collect_dagger_states(policy, norm, device);
    std::cout << "dagger round " << round << " agreement " << trainer.fit_relabelled(states, norm) << '\n';
  }
  // OK(torch-empty-cache-in-loop): once, after training, before the CPU phase.
  c10::cuda::CUDACachingAllocator::emptyCache();
  adapt_on_robot(policy, norm);
}

}  // namespace grasp

int main() {
  torch::manual_seed(376);
  if (!torch::cuda::is_available()) {
    std::cerr << "behaviour cloning needs a CUDA device\n";
    return 1;
  }
  grasp::run_gpu_training();
  return 0;
}
