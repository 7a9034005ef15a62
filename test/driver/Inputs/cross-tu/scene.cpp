// Helpers of a small program whose main() is in main.cpp.
#include "scene.h"

torch::Tensor make_background() { return torch::zeros({3, 4}); }

torch::Tensor upload(const torch::Tensor &t, torch::Device device) {
  return t.to(device, /*non_blocking=*/true);
}

// main() checks CUDA once, before any of these runs.
torch::Tensor cuda_ones() { return torch::ones({2}, torch::kCUDA); }

// main() calls it under a NoGradGuard.
double evaluate(Net &net, const std::vector<torch::Tensor> &batches) {
  double sum = 0;
  for (const auto &x : batches)
    sum += net->forward(x).sum().item<double>();
  return sum;
}
