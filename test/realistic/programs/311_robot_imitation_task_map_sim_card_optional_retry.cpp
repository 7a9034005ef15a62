// Behaviour cloning for a 7-DoF arm: teleoperated demonstrations of three
// tasks (pick, place, push) are recorded as 50-step chunks of joint and
// end-effector state plus a task one-hot, with the operator's joint-velocity
// commands as targets. A task-conditioned MLP policy is trained on them,
// fine-tuned on a new task (open the drawer) in one full-batch step, and
// scored in a simulator that runs on its own card.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kJoints = 7, kState = 2 * kJoints + 7, kTasks = 4, kObs = kState + kTasks, kChunk = 50;
const std::array<std::string, kTasks> kTaskNames = {"pick", "place", "push", "open_drawer"};

// One device for the whole process, chosen on first use.
const torch::Device &compute_device() {
  // OK(torch-cuda-unguarded): CUDA only when it is available.
  static const torch::Device device =
      torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  return device;
}

struct Demo {
  std::string task;
  torch::Tensor obs;      // [kChunk, kObs]
  torch::Tensor actions;  // [kChunk, kJoints]
};

// Stands in for the recorder's ROS bag reader: one chunk of joint states.
Demo record_demo(int64_t task, std::mt19937 &rng) {
  std::normal_distribution<float> noise(0.0f, 0.1f);
  std::vector<float> state(static_cast<size_t>(kChunk * kState));
  for (auto &s : state)
    s = noise(rng);
  auto joints = torch::from_blob(state.data(), {kChunk, kState}, torch::kFloat).clone();
  auto one_hot = F::one_hot(torch::full({kChunk}, task, torch::kLong), kTasks).to(torch::kFloat);
  auto actions = joints.narrow(1, 0, kJoints) * -0.5 + 0.05 * static_cast<double>(task);
  return {kTaskNames[static_cast<size_t>(task)], torch::cat({joints, one_hot}, 1), actions};
}

class DemoBuffer {
 public:
  void add(Demo d) { demos_.push_back(std::move(d)); }
  const Demo &sample(std::mt19937 &rng) const {
    std::uniform_int_distribution<size_t> pick(0, demos_.size() - 1);
    return demos_[pick(rng)];
  }
  size_t size() const { return demos_.size(); }

 private:
  std::deque<Demo> demos_;
};

struct MlpPolicyImpl : nn::Module {
  MlpPolicyImpl()
      : net(register_module("net", nn::Sequential(nn::Linear(kObs, 256), nn::LayerNorm(nn::LayerNormOptions({256})),
                                                  nn::ReLU(), nn::Dropout(0.1), nn::Linear(256, 256), nn::ReLU(),
                                                  nn::Linear(256, kJoints), nn::Tanh()))) {}
  torch::Tensor forward(const torch::Tensor &obs) { return net->forward(obs); }
  nn::Sequential net;
};
TORCH_MODULE(MlpPolicy);

template <typename Policy>
torch::Tensor bc_loss(Policy &policy, const Demo &d, torch::Device device) {
  // BUG(torch-non-blocking-pageable): the demo's observations were cloned
  // from the recorder's std::vector into pageable memory.
  auto obs = d.obs.to(device, /*non_blocking=*/true);
  auto pred = policy->forward(obs);
  // BUG(torch-device-mismatch): only the observations were moved; the
  // operator's commands are still on the host.
  return F::mse_loss(pred, d.actions);
}

namespace guard {
// Teleop glitches sometimes record NaN joint states; stop before they reach Adam.
void check_finite(const torch::Tensor &loss, int64_t step) {
  // BUG(torch-host-sync-in-loop): the NaN check reads the loss on the host
  // on every training step.
  if (!torch::isfinite(loss).all().item<bool>())
    throw std::runtime_error("non-finite BC loss at step " + std::to_string(step));
}
}  // namespace guard

template <typename Policy>
void train_bc(Policy &policy, torch::optim::Optimizer &opt, const DemoBuffer &buffer, torch::Device device,
              int64_t steps) {
  policy->train();
  std::mt19937 rng(7);
  std::map<std::string, torch::Tensor> loss_by_task;
  std::map<std::string, int64_t> chunks_by_task;
  for (const auto &name : kTaskNames)
    loss_by_task[name] = torch::zeros({}, device);
  auto ema = torch::zeros({}, device);
  for (int64_t step = 0; step < steps; ++step) {
    const Demo &d = buffer.sample(rng);
    opt.zero_grad();
    auto loss = bc_loss(policy, d, device);
    loss.backward();
    opt.step();
    guard::check_finite(loss, step);
    // BUG(torch-loss-accumulation-graph): the per-task sums add the loss
    // itself; every step's graph stays reachable from the map.
    loss_by_task[d.task] += loss;
    ++chunks_by_task[d.task];
    // OK(torch-loss-accumulation-graph): detached before the running average.
    ema = 0.99 * ema + 0.01 * loss.detach();
    // OK(torch-host-sync-in-loop): logged every 250 steps only.
    if (step % 250 == 0)
      std::cout << "step " << step << " ema " << ema.item<double>() << '\n';
  }
  for (const auto &kv : loss_by_task)
    std::cout << kv.first << ": " << kv.second.item<double>() / std::max<int64_t>(chunks_by_task[kv.first], 1) << '\n';
}

// One full-batch step over every demonstration of a new task; nullopt when
// the batch did not fit.
std::optional<torch::Tensor> try_finetune(MlpPolicy &policy, torch::optim::Optimizer &opt,
                                          const std::vector<Demo> &demos, torch::Device device) {
  try {
    std::vector<torch::Tensor> obs, act;
    for (const auto &d : demos) {
      obs.push_back(d.obs);
      act.push_back(d.actions);
    }
    policy->train();
    opt.zero_grad();
    auto loss = F::mse_loss(policy->forward(torch::cat(obs).to(device)), torch::cat(act).to(device));
    loss.backward();
    opt.step();
    return loss.detach();
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): the caller runs the same demos again
    // until it fits; the allocator had already emptied its cache.
    // BUG(torch-empty-cache-in-loop): and the caller's do-while repeats it.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return std::nullopt;
  }
}

// Closed-loop rollouts in the physics simulator, which owns its own card.
class SimRunner {
 public:
  // BUG(torch-device-index-unchecked): the default puts the simulator on a
  // second GPU; main() only checked that some GPU exists.
  explicit SimRunner(int card = 1) : device_(torch::kCUDA, static_cast<c10::DeviceIndex>(card)) {}

  double success_rate(const MlpPolicy &policy, int64_t task, int episodes) {
    auto sim_policy = std::dynamic_pointer_cast<MlpPolicyImpl>(policy->clone(device_));
    sim_policy->eval();
    torch::NoGradGuard no_grad;
    int successes = 0;
    auto one_hot = F::one_hot(torch::full({1}, task, torch::TensorOptions().dtype(torch::kLong).device(device_)), kTasks)
                       .to(torch::kFloat);
    for (int ep = 0; ep < episodes; ++ep) {
      auto state = torch::randn({1, kState}, device_) * 0.1;
      for (int t = 0; t < 200; ++t) {
        // OK(torch-device-mismatch): the clone, the state and the one-hot are all on the simulator's card.
        auto action = sim_policy->forward(torch::cat({state, one_hot}, 1));
        state.narrow(1, 0, kJoints).add_(0.05 * action);
      }
      successes += state.narrow(1, 0, kJoints).norm().item<double>() < 0.2 ? 1 : 0;
    }
    return static_cast<double>(successes) / episodes;
  }

 private:
  torch::Device device_;
};

int main() {
  torch::manual_seed(311);
  const torch::Device &device = compute_device();
  std::mt19937 rng(311);
  DemoBuffer buffer;
  for (int i = 0; i < 300; ++i)
    buffer.add(record_demo(i % 3, rng));

  MlpPolicy policy;
  policy->to(device);
  torch::optim::Adam opt(policy->parameters(), torch::optim::AdamOptions(1e-3));
  train_bc(policy, opt, buffer, device, 3000);

  std::vector<Demo> drawer;
  for (int i = 0; i < 40; ++i)
    drawer.push_back(record_demo(3, rng));
  std::optional<torch::Tensor> finetuned;
  do {
    finetuned = try_finetune(policy, opt, drawer, device);
  } while (!finetuned);
  std::cout << "drawer fine-tune loss " << finetuned->item<double>() << '\n';

  if (torch::cuda::is_available()) {
    SimRunner sim;
    std::cout << "pick success " << sim.success_rate(policy, 0, 20) << '\n';
  }
  torch::save(policy, "bc_policy.pt");
}
