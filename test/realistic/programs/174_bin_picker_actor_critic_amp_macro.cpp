// Policy-gradient trainer for a warehouse bin-picking arm in a batched toy
// simulator: the gripper moves in the unit square towards a parcel and is
// rewarded by the negative distance. An actor (move logits) and a critic
// (state value) have their own Adam optimizers. Rollouts come back as a
// std::tuple unpacked with structured bindings; the critic update returns
// std::optional so that short tail rollouts can be skipped. Both networks
// run under CUDA autocast through one macro that hides the 1.13 / 2.x API
// difference; the loss is scaled by hand, LibTorch having no GradScaler.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#if TORCH_VERSION_MAJOR >= 2
#define PICKER_AUTOCAST(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#else
#define PICKER_AUTOCAST(on) at::autocast::set_enabled(on)
#endif

namespace nn = torch::nn;

constexpr int64_t kObs = 6, kMoves = 5, kEnvs = 64, kHorizon = 32, kMinRows = 256;
constexpr double kGamma = 0.97, kLossScale = 512.0;

nn::Sequential make_actor() {
  return nn::Sequential(nn::Linear(kObs, 128), nn::Tanh(), nn::Linear(128, 128), nn::Tanh(), nn::Linear(128, kMoves));
}

nn::Sequential make_critic() {
  return nn::Sequential(nn::Linear(kObs, 128), nn::LayerNorm(nn::LayerNormOptions({128})), nn::ReLU(),
                        nn::Linear(128, 1));
}

// Up, down, left, right, stay.
torch::Tensor move_table(torch::Device device) {
  return torch::tensor({0.f, 1.f, 0.f, -1.f, -1.f, 0.f, 1.f, 0.f, 0.f, 0.f}, device).view({kMoves, 2}) * 0.05;
}

using Rollout = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>;  // obs, moves, returns

Rollout collect_rollout(nn::Sequential& actor, int64_t horizon, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto table = move_table(device);
  auto gripper = torch::rand({kEnvs, 2}, device);
  auto parcel = torch::rand({kEnvs, 2}, device);
  std::vector<torch::Tensor> obs, moves, rewards;
  for (int64_t t = 0; t < horizon; ++t) {
    auto o = torch::cat({gripper, parcel, parcel - gripper}, 1);
    // OK(torch-inference-without-no-grad): the rollout holds a NoGradGuard.
    auto probs = torch::softmax(actor->forward(o), 1);
    auto m = torch::multinomial(probs, 1).squeeze(1);
    gripper = (gripper + table.index_select(0, m)).clamp(0, 1);
    obs.push_back(o);
    moves.push_back(m);
    rewards.push_back(-(parcel - gripper).norm(2, 1));
  }
  std::vector<torch::Tensor> returns(horizon);
  auto g = torch::zeros({kEnvs}, device);
  for (int64_t t = horizon - 1; t >= 0; --t) {
    g = rewards[t] + kGamma * g;
    returns[t] = g;
  }
  return {torch::cat(obs), torch::cat(moves), torch::cat(returns)};
}

void unscale_grads(nn::Module& net, double scale) {
  for (auto& p : net.parameters())
    if (p.grad().defined())
      p.grad().div_(scale);
}

std::optional<torch::Tensor> critic_update(nn::Sequential& critic, torch::optim::Adam& opt, const torch::Tensor& obs,
                                           const torch::Tensor& returns) {
  // BUG(torch-autocast-region): a tail rollout returns below with autocast
  // still on; the caller's next actor forward and every later op of this
  // thread run in float16.
  PICKER_AUTOCAST(true);
  auto values = critic->forward(obs).squeeze(1);
  auto loss = torch::mse_loss(values, returns);
  if (obs.size(0) < kMinRows)
    return std::nullopt;
  PICKER_AUTOCAST(false);
  opt.zero_grad();
  // OK(torch-autocast-region): closed region, loss scaled before backward.
  (loss * kLossScale).backward();
  unscale_grads(*critic, kLossScale);
  opt.step();
  return loss.detach();
}

// Greedy success rate: a parcel counts as picked within 2 cm.
double greedy_success(nn::Sequential& actor, torch::Device device) {
  auto table = move_table(device);
  auto gripper = torch::rand({256, 2}, device);
  auto parcel = torch::rand({256, 2}, device);
  for (int64_t t = 0; t < 2 * kHorizon; ++t) {
    // BUG(torch-inference-without-no-grad): a pure evaluation rollout with
    // autograd recording every step's graph.
    auto logits = actor->forward(torch::cat({gripper, parcel, parcel - gripper}, 1));
    gripper = (gripper + table.index_select(0, logits.argmax(1))).clamp(0, 1);
  }
  return ((parcel - gripper).norm(2, 1) < 0.02).to(torch::kFloat).mean().item<double>();
}

struct RunningStats {
  torch::Tensor actor_loss_sum;
  torch::Tensor critic_loss_sum;
  int64_t critic_updates = 0;
};

int main(int argc, char** argv) {
  torch::manual_seed(174);
  const bool gpu = torch::cuda::is_available();
  torch::Device device = gpu ? torch::kCUDA : torch::kCPU;
  auto actor = make_actor();
  auto critic = make_critic();
  actor->to(device);
  critic->to(device);
  torch::optim::Adam opt_actor(actor->parameters(), torch::optim::AdamOptions(3e-4));
  torch::optim::Adam opt_critic(critic->parameters(), torch::optim::AdamOptions(1e-3));

  const int64_t iterations = argc > 1 ? std::stoll(argv[1]) : 2000;
  RunningStats stats{torch::zeros({}, device), torch::zeros({}, device)};
  for (int64_t it = 0; it < iterations; ++it) {
    const int64_t horizon = it % 50 == 49 ? 2 : kHorizon;  // shift change: short tail episodes
    auto [obs, moves, returns] = collect_rollout(actor, horizon, device);
    torch::Tensor baseline;
    {
      torch::NoGradGuard no_grad;
      baseline = critic->forward(obs).squeeze(1);
    }
    auto advantage = returns - baseline;
    advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-6);

    PICKER_AUTOCAST(true);
    auto logp = torch::log_softmax(actor->forward(obs), 1).gather(1, moves.unsqueeze(1)).squeeze(1);
    auto actor_loss = -(logp * advantage).mean();
    PICKER_AUTOCAST(false);
    opt_actor.zero_grad();
    // BUG(torch-autocast-region): the actor's loss comes from a float16
    // region and reaches backward() unscaled, unlike the critic's.
    actor_loss.backward();
    // OK(torch-missing-zero-grad): each optimizer resets before its backward.
    opt_actor.step();
    // BUG(torch-loss-accumulation-graph): the actor loss joins the running
    // sum with its graph; every iteration's graph stays reachable.
    stats.actor_loss_sum += actor_loss;

    if (auto critic_loss = critic_update(critic, opt_critic, obs, returns)) {
      // OK(torch-loss-accumulation-graph): critic_update() returns it detached.
      stats.critic_loss_sum += *critic_loss;
      ++stats.critic_updates;
    }
    if (it % 100 == 99) {
      // OK(torch-host-sync-in-loop): read every 100 iterations.
      std::cout << "it " << it + 1 << " actor " << (stats.actor_loss_sum / 100).item<double>() << " critic "
                << (stats.critic_loss_sum / std::max<int64_t>(stats.critic_updates, 1)).item<double>() << '\n';
      stats.actor_loss_sum.zero_();
      stats.critic_loss_sum.zero_();
      stats.critic_updates = 0;
    }
  }
  std::cout << "greedy pick rate " << greedy_success(actor, device) << '\n';
}
