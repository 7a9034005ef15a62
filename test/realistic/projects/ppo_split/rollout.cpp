#include "ppo.h"

Batch collect(Policy &policy, torch::Device device, int64_t steps) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> obs, actions, logps;
  auto o = torch::randn({kObs}, device);
  for (int64_t t = 0; t < steps; ++t) {
    // OK(torch-inference-without-no-grad): acting under the NoGradGuard above.
    auto logp = policy->forward(o.unsqueeze(0)).squeeze(0);
    auto a = torch::multinomial(logp.exp(), 1);
    obs.push_back(o);
    actions.push_back(a.squeeze(0));
    logps.push_back(logp.gather(0, a).squeeze(0));
    o = torch::randn({kObs}, device);
  }
  auto adv = torch::randn({steps}, device);
  return {torch::stack(obs), torch::stack(actions), torch::stack(logps), (adv - adv.mean()) / (adv.std() + 1e-8)};
}
