// Image quality metrics of the reconstructions.
#include "recon.h"

#include <cmath>

namespace {

torch::Tensor gaussian_window(int64_t size, double sigma, const torch::TensorOptions &opts) {
  auto r = torch::arange(size, opts) - static_cast<double>(size / 2);
  auto g = torch::exp(-r.pow(2) / (2 * sigma * sigma));
  g = g / g.sum();
  return (g.view({size, 1}) * g.view({1, size})).view({1, 1, size, size});
}

}  // namespace

// Mean SSIM of two [B, 1, H, W] magnitude images with a 7x7 Gaussian window.
torch::Tensor ssim(const torch::Tensor &a, const torch::Tensor &b) {
  auto w = gaussian_window(7, 1.5, a.options());
  auto blur = [&](const torch::Tensor &x) { return torch::conv2d(x, w, {}, 1, 3); };
  auto mu_a = blur(a);
  auto mu_b = blur(b);
  auto var_a = blur(a * a) - mu_a * mu_a;
  auto var_b = blur(b * b) - mu_b * mu_b;
  auto cov = blur(a * b) - mu_a * mu_b;
  const double c1 = 1e-4, c2 = 9e-4;
  auto map = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a * mu_a + mu_b * mu_b + c1) * (var_a + var_b + c2));
  return map.mean();
}

double psnr(const torch::Tensor &a, const torch::Tensor &b) {
  const double peak = b.max().item<double>();
  const double mse = (a - b).pow(2).mean().item<double>();
  return 10.0 * std::log10(peak * peak / std::max(mse, 1e-12));
}
