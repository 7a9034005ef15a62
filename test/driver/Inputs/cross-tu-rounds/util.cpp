#include "ppo.h"
void place(torch::nn::Module &module, torch::Device device) { module.to(device); }
bool kl_exceeded(const torch::Tensor &old_logp, const torch::Tensor &new_logp) {
  return (old_logp - new_logp).mean().item<double>() > 0.1;
}
