#include "ppo.h"

#include <iostream>

int main() {
  auto device = pick_device();
  Policy policy;
  place(*policy, device);
  torch::optim::Adam opt(policy->parameters(), torch::optim::AdamOptions(3e-4));

  {
    torch::NoGradGuard no_grad;
    auto probe = torch::zeros({1, kObs});
    // BUG(torch-device-mismatch): place() (util.cpp) moved the policy
    // to 'device'; the probe observation is a host tensor.
    auto logp = policy->forward(probe);
    std::cout << "initial entropy " << -(logp.exp() * logp).sum().item<double>() << '\n';
    // OK(torch-device-mismatch): the same probe, moved first.
    auto moved = policy->forward(probe.to(device));
    std::cout << "moved probe " << moved.sizes() << '\n';
  }

  for (int iteration = 0; iteration < 100; ++iteration) {
    // OK(torch-device-mismatch): place() moved the policy to 'device' at start-up.
    auto batch = collect(policy, device, 512);
    UpdateStats stats{torch::zeros({}, device)};
    ppo_update(policy, opt, batch, stats);
    if (iteration % 10 == 0)
      std::cout << "iteration " << iteration << " loss " << (stats.policy_loss / stats.epochs).item<double>() << '\n';
  }
  return 0;
}
