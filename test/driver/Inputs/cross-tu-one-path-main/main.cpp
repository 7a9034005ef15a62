#include <torch/torch.h>
torch::Tensor render(torch::Tensor x);

int main() {
  auto rays = torch::zeros({2}).to(torch::kCUDA);
  for (int i = 0; i < 3; ++i)
    render(rays);
}
