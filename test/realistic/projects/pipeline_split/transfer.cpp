#include "pipeline.h"

#include <iostream>

void init_runtime() {
  torch::manual_seed(42);
  // BUG(torch-cuda-unguarded): main.cpp calls init_runtime() before it
  // checks torch::cuda::is_available().
  auto context = torch::empty({1}, torch::TensorOptions().device(torch::kCUDA));
  std::cout << "runtime ready on " << context.device() << '\n';
}

torch::Tensor upload(const torch::Tensor &host, torch::Device device) {
  return host.to(device, /*non_blocking=*/true);
}

void export_weights(Regressor &model, const std::string &path) {
  torch::NoGradGuard no_grad;
  for (auto &p : model->parameters())
    // BUG(torch-tensor-to-discarded): the host copies are discarded; the
    // archive gets the parameters wherever they live.
    p.cpu();
  torch::save(model, path);
}
