// Clean twin of device_mismatch.cpp: the input is moved to the model's
// device before forward(), so nothing throws.
// Same line numbers as the bug.
#include <torch/torch.h>

#include <cstdio>

int main() {
  if (!torch::cuda::is_available()) {
    std::puts("no CUDA device");
    return 77;
  }
  torch::Device device(torch::kCUDA);
  torch::nn::Linear net(64, 8);
  net->to(device);
  torch::Tensor input = torch::randn({4, 64}).to(device);
  torch::Tensor out = net->forward(input);
  std::printf("done: %f\n", out.sum().item<double>());
  return 0;
}
