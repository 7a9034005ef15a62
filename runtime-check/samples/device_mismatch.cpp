// Seeded bug (torch-device-mismatch): the model is moved to CUDA, the input
// stays on the CPU, and forward() throws c10::Error ("Expected all tensors to
// be on the same device"). The program dies on the uncaught exception.
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
  torch::Tensor input = torch::randn({4, 64});
  torch::Tensor out = net->forward(input);
  std::printf("done: %f\n", out.sum().item<double>());
  return 0;
}
