// The U-Net, checkpoint loading, coil sensitivities, volume reconstruction.
#include "recon.h"

namespace {

torch::nn::Sequential conv_block(int64_t in, int64_t out) {
  return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1)),
                               torch::nn::BatchNorm2d(out), torch::nn::ReLU(),
                               torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3).padding(1)),
                               torch::nn::BatchNorm2d(out), torch::nn::ReLU(), torch::nn::Dropout(0.1));
}

torch::Tensor upsample2x(const torch::Tensor &x) {
  return torch::nn::functional::interpolate(
      x, torch::nn::functional::InterpolateFuncOptions().scale_factor(std::vector<double>{2.0, 2.0}).mode(torch::kNearest));
}

}  // namespace

UNetLiteImpl::UNetLiteImpl(int64_t ch) {
  down1 = register_module("down1", conv_block(1, ch));
  down2 = register_module("down2", conv_block(ch, 2 * ch));
  bottom = register_module("bottom", conv_block(2 * ch, 4 * ch));
  up2 = register_module("up2", conv_block(6 * ch, 2 * ch));
  up1 = register_module("up1", conv_block(3 * ch, ch));
  out = register_module("out", torch::nn::Conv2d(torch::nn::Conv2dOptions(ch, 1, 1)));
}

torch::Tensor UNetLiteImpl::forward(torch::Tensor x) {
  auto d1 = down1->forward(x);
  auto d2 = down2->forward(torch::max_pool2d(d1, 2));
  auto b = bottom->forward(torch::max_pool2d(d2, 2));
  auto u2 = up2->forward(torch::cat({upsample2x(b), d2}, 1));
  auto u1 = up1->forward(torch::cat({upsample2x(u2), d1}, 1));
  return x + out->forward(u1);
}

// Shared with the scanner-side service, which only ever runs inference.
UNetLite load_pretrained(const std::string &path, torch::Device device) {
  UNetLite net(32);
  if (!path.empty())
    torch::load(net, path);
  net->to(device);
  net->eval();
  return net;
}

// Sensitivity maps from the fully sampled low frequencies (the ACS lines):
// low-pass each coil image, divide by the root-sum-of-squares over coils.
torch::Tensor estimate_coil_maps(const torch::Tensor &kspace) {
  const torch::Device aux(torch::kCUDA, kCoilGpu);
  auto k = kspace.to(aux);
  auto low = torch::zeros_like(k);
  low.narrow(-1, 0, kAcs / 2).copy_(k.narrow(-1, 0, kAcs / 2));
  low.narrow(-1, kSide - kAcs / 2, kAcs / 2).copy_(k.narrow(-1, kSide - kAcs / 2, kAcs / 2));
  auto coil_images = torch::fft::ifft2(low);
  auto rss = coil_images.abs().pow(2).sum(1, true).sqrt().clamp_min(1e-6);
  return (coil_images / rss).to(kspace.device());
}

torch::Tensor reconstruct_volume(UNetLite &net, const torch::Tensor &slices, torch::Device device) {
  std::vector<torch::Tensor> out;
  for (int64_t s = 0; s < slices.size(0); s += 8) {
    auto chunk = slices.narrow(0, s, std::min<int64_t>(8, slices.size(0) - s)).to(device);
    // BUG(torch-inference-without-no-grad): main.cpp reconstructs the volume
    // with autograd on; every chunk's forward records activations for nothing.
    out.push_back(net->forward(chunk).detach().cpu());
  }
  return torch::cat(out);
}
