// The training program's main: it checks CUDA before it selects it.
#include <torch/torch.h>

torch::Device training_device();
void train_epoch(torch::Device device);

int main() {
  torch::Device device = training_device();
  train_epoch(device);
  auto probe = torch::ones({1}, torch::kCUDA);
  return static_cast<int>(probe.sum().item<float>());
}
