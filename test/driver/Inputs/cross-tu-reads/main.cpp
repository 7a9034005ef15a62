#include "report.h"

int main() {
  Net net;
  std::vector<torch::Tensor> batches;
  torch::NoGradGuard no_grad;
  auto unit = normalise(halve(torch::ones({2})));
  return score(net, batches) > 0;
}
