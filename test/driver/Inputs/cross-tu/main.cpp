#include "scene.h"

int main() {
  if (!torch::cuda::is_available())
    return 1;
  auto background = make_background();
  auto frame = torch::randn({3, 4}).cuda();
  auto image = frame + background;
  upload(torch::randn({8}), torch::kCUDA);
  auto ones = cuda_ones();
  Net net;
  std::vector<torch::Tensor> batches;
  {
    torch::NoGradGuard no_grad;
    evaluate(net, batches);
  }
  return 0;
}
