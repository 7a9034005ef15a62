#include "ppo.h"
void update(Policy &policy, torch::optim::Optimizer &opt, const Batch &batch) {
  for (int epoch = 0; epoch < 10; ++epoch) {
    auto logp = policy->forward(batch.obs).sum(1);
    auto loss = (logp - batch.old_logp).mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (kl_exceeded(batch.old_logp, logp))
      break;
  }
}

void report(const Batch &batch) {
  // Outside any loop: one sync per call of report().
  if (kl_exceeded(batch.old_logp, batch.old_logp * 0.5))
    return;
}
