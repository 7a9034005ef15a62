#include "ppo.h"

torch::Device pick_device() {
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

void place(torch::nn::Module &module, torch::Device device) { module.to(device); }

bool kl_exceeded(const torch::Tensor &old_logp, const torch::Tensor &new_logp, double target) {
  // BUG(torch-host-sync-in-loop): ppo_update() (update.cpp) calls this on
  // every epoch of its training loop, with log-probabilities on the device.
  return (old_logp - new_logp).mean().item<double>() > 1.5 * target;
}
