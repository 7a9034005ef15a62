#include "ppo.h"

void ppo_update(Policy &policy, torch::optim::Optimizer &opt, const Batch &batch, UpdateStats &stats) {
  for (int64_t epoch = 0; epoch < 10; ++epoch) {
    auto logp = policy->forward(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1);
    auto ratio = torch::exp(logp - batch.old_logp);
    auto loss = -torch::min(ratio * batch.advantage, torch::clamp(ratio, 0.8, 1.2) * batch.advantage).mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): 'stats' belongs to the caller and
    // outlives every epoch; the loss still holds its graph.
    stats.policy_loss += loss;
    ++stats.epochs;
    if (kl_exceeded(batch.old_logp, logp, 0.01))
      break;
  }
}
