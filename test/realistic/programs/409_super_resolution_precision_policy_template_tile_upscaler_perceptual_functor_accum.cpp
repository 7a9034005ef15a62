// x2 super-resolution of scanned archive photographs with an ESPCN-style net
// (conv trunk + PixelShuffle). The step templates take a precision policy
// (Fp32, Bf16, Fp16) whose nested Region type is the autocast guard; a
// perceptual fine-tune follows; inference upscales big scans tile by tile.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <vector>
namespace nn = torch::nn;
namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define SR_AUTOCAST(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#else
#define SR_AUTOCAST(on) at::autocast::set_enabled(on)
#endif
constexpr int64_t kScale = 2;

// CUDA autocast in `dtype` while alive; puts back the flag and the dtype it found.
class AmpGuard {
 public:
  explicit AmpGuard(at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR >= 2
    was_on_ = at::autocast::is_autocast_enabled(at::kCUDA);
    old_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    was_on_ = at::autocast::is_enabled();
    old_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(true);
#endif
  }
  ~AmpGuard() {
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_enabled(at::kCUDA, was_on_);
    at::autocast::set_autocast_dtype(at::kCUDA, old_dtype_);
#else
    at::autocast::set_enabled(was_on_);
    at::autocast::set_autocast_gpu_dtype(old_dtype_);
#endif
  }
  AmpGuard(const AmpGuard&) = delete;
  AmpGuard& operator=(const AmpGuard&) = delete;
 private:
  bool was_on_ = false;
  at::ScalarType old_dtype_ = at::kHalf;
};
struct HalfRegion : AmpGuard { HalfRegion() : AmpGuard(at::kHalf) {} };
struct BFloat16Region : AmpGuard { BFloat16Region() : AmpGuard(at::kBFloat16) {} };
struct NoRegion {};

struct Fp32 { using Region = NoRegion; };
struct Bf16 { using Region = BFloat16Region; };
struct Fp16 { using Region = HalfRegion; };

class LossScaler {
 public:
  explicit LossScaler(double scale) : scale_(scale) {}
  torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }
  void unscale(const std::vector<torch::Tensor>& params) const {
    for (const auto& p : params)
      if (p.grad().defined())
        p.mutable_grad().div_(scale_);
  }
 private:
  double scale_;
};

struct EspcnImpl : nn::Module {
  EspcnImpl()
      : trunk(register_module("trunk", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(3, 64, 5).padding(2)), nn::Tanh(),
                                                      nn::Conv2d(nn::Conv2dOptions(64, 32, 3).padding(1)), nn::Tanh()))),
        to_sub(register_module("to_sub", nn::Conv2d(nn::Conv2dOptions(32, 3 * kScale * kScale, 3).padding(1)))),
        shuffle(register_module("shuffle", nn::PixelShuffle(kScale))) {}
  torch::Tensor forward(const torch::Tensor& lr) { return shuffle(to_sub(trunk->forward(lr))); }
  nn::Sequential trunk;
  nn::Conv2d to_sub;
  nn::PixelShuffle shuffle;
};
TORCH_MODULE(Espcn);

struct Patch { torch::Tensor lr, hr; };  // [B,3,h,w], [B,3,2h,2w]
template <class Precision>
torch::Tensor l1_in_region(Espcn& net, const Patch& p) {
  typename Precision::Region region;
  return F::l1_loss(net->forward(p.lr), p.hr);
}

// One plain step; the trainer picks the instantiation from the hardware.
template <class Precision>
void plain_step(Espcn& net, torch::optim::Optimizer& opt, const Patch& p) {
  opt.zero_grad();
  torch::Tensor loss;
  {
    typename Precision::Region region;
    loss = F::l1_loss(net->forward(p.lr), p.hr);
  }
  // BUG(torch-autocast-region): plain_step<Fp16>: a float16 mean loss, never scaled.
  loss.backward();
  opt.step();
}
void train_x2(Espcn& net, const std::vector<Patch>& patches, bool bf16_capable, bool cuda) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  for (const auto& p : patches) {
    if (!cuda)
      plain_step<Fp32>(net, opt, p);
    else if (bf16_capable)
      plain_step<Bf16>(net, opt, p);
    else
      plain_step<Fp16>(net, opt, p);
  }
}

// Float16 training with a static loss scale; steps every batch.
void train_x2_scaled(Espcn& net, const std::vector<Patch>& patches, const LossScaler& scaler) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(5e-4));
  for (const auto& p : patches) {
    opt.zero_grad();
    auto loss = l1_in_region<Fp16>(net, p);
    // OK(torch-autocast-region): the float16 loss is multiplied by the scale.
    scaler.scale(loss).backward();
    scaler.unscale(net->parameters());
    opt.step();
  }
}

// Large effective batch on the 8 GB card: accum patches per update.
template <class Precision>
void train_accumulated(Espcn& net, const std::vector<Patch>& patches, int64_t accum) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(2e-4));
  opt.zero_grad();
  for (size_t i = 0; i < patches.size(); ++i) {
    auto loss = l1_in_region<Precision>(net, patches[i]) / static_cast<double>(accum);
    // OK(torch-autocast-region, torch-grad-accumulation-unscaled): Bf16 and
    // Fp32 instantiations only, and the loss is divided by accum.
    loss.backward();
    if ((i + 1) % accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}

// Frozen random-feature extractor standing in for a VGG perceptual network.
struct PerceptualL1 {
  nn::Sequential features;
  torch::Tensor operator()(const torch::Tensor& sr, const torch::Tensor& hr) {
    torch::Tensor target;
    {
      torch::NoGradGuard no_grad;
      target = features->forward(hr);
    }
    return F::l1_loss(features->forward(sr), target);
  }
};
void finetune_perceptual(Espcn& net, PerceptualL1& perceptual, const std::vector<Patch>& patches, int64_t accum) {
  net->train();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  opt.zero_grad();
  for (size_t it = 0; it < patches.size(); ++it) {
    auto loss = perceptual(net->forward(patches[it].lr), patches[it].hr);
    // BUG(torch-grad-accumulation-unscaled): the functor's mean L1, accum per step.
    loss.backward();
    if ((it + 1) % accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}
double psnr(Espcn& net, const Patch& p) {
  torch::NoGradGuard no_grad;
  // OK(torch-autocast-region): the guard restores autocast on the early return.
  AmpGuard amp(at::kHalf);
  if (p.lr.size(2) < 8)
    return 0.0;
  auto mse = F::mse_loss(net->forward(p.lr).to(torch::kFloat).clamp(0, 1), p.hr).item<double>();
  return 10.0 * std::log10(1.0 / std::max(mse, 1e-10));
}

// Upscales a scan tile by tile; a tile size that does not divide the scan is an error.
torch::Tensor upscale_scan(Espcn& net, const torch::Tensor& scan, int64_t tile) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> rows;
  // BUG(torch-autocast-region): the throw below leaves CUDA autocast on.
  SR_AUTOCAST(true);
  if (scan.size(2) % tile != 0 || scan.size(3) % tile != 0)
    throw std::invalid_argument("tile size must divide the scan");
  for (int64_t y = 0; y < scan.size(2); y += tile) {
    std::vector<torch::Tensor> cols;
    for (int64_t x = 0; x < scan.size(3); x += tile)
      cols.push_back(net->forward(scan.slice(2, y, y + tile).slice(3, x, x + tile)).to(torch::kFloat));
    rows.push_back(torch::cat(cols, 3));
  }
  SR_AUTOCAST(false);
  return torch::cat(rows, 2);
}

// Thumbnail preview: falls back to bicubic when the network rejects the input.
torch::Tensor preview(Espcn& net, const torch::Tensor& thumb) {
  torch::NoGradGuard no_grad;
  torch::Tensor out;
  // OK(torch-autocast-region): the throw is caught by this function's own try
  // block, and autocast is switched off after it.
  SR_AUTOCAST(true);
  try {
    if (thumb.size(1) != 3)
      throw std::invalid_argument("preview expects RGB");
    out = net->forward(thumb).to(torch::kFloat);
  } catch (const std::invalid_argument& e) {
    std::cerr << "preview: " << e.what() << ", using bicubic\n";
    auto up = F::InterpolateFuncOptions().scale_factor(std::vector<double>{2.0, 2.0}).mode(torch::kBicubic);
    out = F::interpolate(thumb.to(torch::kFloat), up.align_corners(false));
  }
  SR_AUTOCAST(false);
  return out;
}
std::vector<Patch> make_patches(int64_t n, torch::Device device) {
  std::vector<Patch> out;
  for (int64_t i = 0; i < n; ++i) {
    auto hr = torch::rand({16, 3, 48, 48}, device);
    out.push_back({F::avg_pool2d(hr, F::AvgPool2dFuncOptions(2)), hr});
  }
  return out;
}
int main() {
  torch::manual_seed(409);
  const bool cuda = torch::cuda::is_available();
  const torch::Device device = cuda ? torch::kCUDA : torch::kCPU;
  Espcn net;
  net->to(device);
  const auto patches = make_patches(120, device);
  train_x2(net, patches, /*bf16_capable=*/false, cuda);
  train_x2_scaled(net, patches, LossScaler(4096.0));
  train_accumulated<Bf16>(net, patches, 4);
  train_accumulated<Fp32>(net, patches, 4);
  PerceptualL1 perceptual{nn::Sequential(nn::Conv2d(nn::Conv2dOptions(3, 16, 3).padding(1)), nn::ReLU(),
                                         nn::Conv2d(nn::Conv2dOptions(16, 16, 3).stride(2)))};
  perceptual.features->to(device);
  for (auto& w : perceptual.features->parameters())
    w.requires_grad_(false);
  finetune_perceptual(net, perceptual, patches, 8);
  net->eval();
  std::cout << "PSNR " << psnr(net, patches.front()) << " dB\n";
  auto scan = torch::rand({1, 3, 256, 192}, device);
  std::cout << "upscaled " << upscale_scan(net, scan, 64).sizes() << '\n';
  std::cout << "preview " << preview(net, scan.slice(2, 0, 32).slice(3, 0, 32)).sizes() << '\n';
}
