#include "ppo.h"
int main() {
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Policy policy;
  place(*policy, device);
  torch::optim::SGD opt(policy->parameters(), 0.1);
  Batch batch{torch::randn({8, 4}, device), torch::randn({8}, device)};
  update(policy, opt, batch);
  report(batch);
}
