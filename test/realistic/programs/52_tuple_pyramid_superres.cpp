// A 2x super-resolution network trained on synthetic textures. Examples are
// (low-res, high-res, scale) tuples, image pyramids are std::arrays, the
// per-step statistics come back as a std::tuple, and a recursive helper
// upsamples by repeated 2x passes at inference time.
#include <torch/torch.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <tuple>
#include <utility>

namespace F = torch::nn::functional;

struct SrNetImpl : torch::nn::Module {
  SrNetImpl()
      : head(register_module("head", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).padding(1)))),
        body(register_module("body", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 32, 3).padding(1)))),
        tail(register_module("tail", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 12, 3).padding(1)))) {}
  // 2x upsampling through a pixel shuffle, plus a bicubic skip.
  torch::Tensor forward(torch::Tensor lr) {
    auto f = torch::relu(head(lr));
    f = f + torch::relu(body(f));
    auto skip = F::interpolate(lr, F::InterpolateFuncOptions().scale_factor(std::vector<double>{2.0, 2.0}).mode(torch::kBicubic).align_corners(false));
    return skip + F::pixel_shuffle(tail(f), F::PixelShuffleFuncOptions(2));
  }
  torch::nn::Conv2d head, body, tail;
};
TORCH_MODULE(SrNet);

using Example = std::tuple<torch::Tensor, torch::Tensor, double>;
using Pyramid = std::array<torch::Tensor, 3>;

torch::Tensor texture(int64_t n, int64_t size) {
  auto coords = torch::linspace(0.0, 6.28, size);
  auto freq = torch::rand({n, 3, 1, 1}) * 4 + 1;
  auto wave = torch::sin(freq * coords.view({1, 1, size, 1})) * torch::cos(freq * coords.view({1, 1, 1, size}));
  return 0.5 + 0.5 * wave;
}

Pyramid pyramid(const torch::Tensor &img) {
  auto half = F::avg_pool2d(img, F::AvgPool2dFuncOptions(2));
  return {img, half, F::avg_pool2d(half, F::AvgPool2dFuncOptions(2))};
}

// A training example at a random scale of the pyramid: the low-res input
// moved to the device, the 2x target, and the scale factor for logging.
Example make_example(int64_t n, torch::Device device) {
  auto levels = pyramid(texture(n, 64));
  const int64_t level = static_cast<int64_t>(torch::randint(0, 2, {1}).item<int64_t>());
  auto hr = levels[level];
  auto lr = levels[level + 1];
  return {lr.to(device), hr.to(device), std::pow(2.0, static_cast<double>(level))};
}

double validate(SrNet &net, torch::Device device) {
  torch::NoGradGuard no_grad;
  net->eval();
  double psnr = 0.0;
  for (int i = 0; i < 8; ++i) {
    auto levels = pyramid(texture(8, 64));
    auto pair = std::make_pair(levels[1].to(device), levels[0]);
    auto sr = net->forward(pair.first);
    // BUG(torch-device-mismatch): only the input half of the pair was moved;
    // the target is still on the host.
    auto mse = torch::mse_loss(sr, pair.second);
    psnr += -10.0 * std::log10(mse.item<double>());
  }
  net->train();
  return psnr / 8.0;
}

// Upsamples by 2^times with repeated passes of the network.
torch::Tensor upsample_recursive(SrNet &net, const torch::Tensor &x, int times) {
  if (times == 0) return x;
  return upsample_recursive(net, net->forward(x).clamp(0.0, 1.0), times - 1);
}

std::tuple<torch::Tensor, torch::Tensor> step_stats(const torch::Tensor &sr, const torch::Tensor &hr) {
  auto mse = torch::mse_loss(sr, hr);
  return {mse, -10.0 * torch::log10(mse.detach())};
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  SrNet net;
  net->to(device);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(5e-4));

  // (sum of losses, sum of PSNR) over the run.
  std::tuple<torch::Tensor, torch::Tensor> totals{torch::zeros({}, device), torch::zeros({}, device)};
  for (int64_t step = 0; step < 4000; ++step) {
    auto example = make_example(16, device);
    auto lr = std::get<0>(example);
    auto sr = net->forward(lr);
    // OK(torch-device-mismatch): make_example() moved both images.
    auto stats = step_stats(sr, std::get<1>(example));
    auto loss = std::get<0>(stats);
    opt.zero_grad();
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): the first element of 'totals' lives
    // for the whole run and keeps every step's graph.
    std::get<0>(totals) += loss;
    // OK(torch-loss-accumulation-graph): the PSNR is computed from a detached
    // loss.
    std::get<1>(totals) += std::get<1>(stats);
    // BUG(torch-host-sync-in-loop): reading the PSNR back on every step waits
    // for the step to finish on the device.
    const double psnr = std::get<1>(stats).item<double>();
    if (step % 500 == 0) std::cout << "step " << step << " scale " << std::get<2>(example) << " psnr " << psnr << '\n';
  }
  std::cout << "validation psnr " << validate(net, device) << '\n';
  std::cout << "mean loss " << (std::get<0>(totals) / 4000.0).item<double>() << " mean psnr "
            << (std::get<1>(totals) / 4000.0).item<double>() << '\n';

  torch::NoGradGuard no_grad;
  net->eval();
  auto test = pyramid(texture(2, 128));
  auto small = test[2];
  // BUG(torch-tensor-to-discarded): the moved copy is thrown away.
  small.to(device);
  auto small_dev = test[2].to(device);
  // OK(torch-device-mismatch): the input was moved to the network's device.
  auto big = upsample_recursive(net, small_dev, 2);
  auto ref = test[0].to(device);
  // OK(torch-device-mismatch): both sides on 'device'.
  std::cout << "4x psnr " << (-10.0 * torch::log10(torch::mse_loss(big, ref))).item<double>() << " (input "
            << small.sizes() << ")\n";
  return 0;
}
