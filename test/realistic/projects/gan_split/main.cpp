#include "gan.h"

#include <iostream>

int main() {
  if (!torch::cuda::is_available()) {
    std::cerr << "this GAN trainer needs CUDA\n";
    return 1;
  }
  torch::Device device(torch::kCUDA, 0);
  Gen gen;
  Disc disc;
  gen->to(device);
  disc->to(device);
  auto stats = train_gan(gen, disc, device, 10, 200);
  std::cout << "d " << (stats.d_total / stats.steps).item<double>() << " g "
            << (stats.g_total / stats.steps).item<double>() << '\n';

  auto sample_on = sampling_device();
  gen->to(sample_on);
  torch::NoGradGuard no_grad;
  auto samples = gen->forward(torch::randn({1000, kNoise}, sample_on));
  std::cout << "sample mean radius " << samples.norm(2, 1).mean().item<double>() << '\n';
  return 0;
}
