#include "ranker.h"

#include <iostream>

int main() {
  torch::manual_seed(2);
  const bool gpu = torch::cuda::is_available();
  // OK(torch-cuda-unguarded): CUDA only when the check above said so.
  torch::Device device = gpu ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  Scorer model;
  model->to(device);
  fit(model, device, 1000);
  {
    torch::NoGradGuard no_grad;
    std::cout << "eval loss " << evaluate(model, device, 20) << '\n';
  }
  score_candidates(model, device, 5);
  if (gpu) {
    torch::NoGradGuard no_grad;
    model->eval();
    auto scores = model->forward(host_features(2048).to(device));
    std::cout << "score histogram " << gpu_score_histogram(scores) << '\n';
  }
  return 0;
}
