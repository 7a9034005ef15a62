// Cloud and cloud-shadow masking for Sentinel-2 granules: a compact U-Net
// labels each pixel of 4-band (B2, B3, B4, B8) 64x64 tiles as clear /
// cloud / shadow / thin cirrus. Training runs in float16 with a static loss
// scale and gradient accumulation; tiles with thin cirrus are revisited in
// bfloat16 under a per-step scope; a masker then labels the archive. The
// run's settings come from a builder, and a tile is validated by the
// BandStack view it is read through. LibTorch 1.13/2.x.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <utility>
#include <vector>

namespace nn = torch::nn;

#if TORCH_VERSION_MAJOR >= 2
#define S2_AMP(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#define S2_AMP_IS_ON() at::autocast::is_autocast_enabled(at::kCUDA)
#define S2_AMP_DTYPE() at::autocast::get_autocast_dtype(at::kCUDA)
#define S2_AMP_SET_DTYPE(t) at::autocast::set_autocast_dtype(at::kCUDA, (t))
#else
#define S2_AMP(on) at::autocast::set_enabled(on)
#define S2_AMP_IS_ON() at::autocast::is_enabled()
#define S2_AMP_DTYPE() at::autocast::get_autocast_gpu_dtype()
#define S2_AMP_SET_DTYPE(t) at::autocast::set_autocast_gpu_dtype(t)
#endif

namespace s2 {

constexpr int64_t kBands = 4, kSide = 64, kClasses = 4, kCirrus = 3;

struct CloudConfig {
  torch::Device device = torch::kCPU;
  int64_t accum_steps = 1;
  double loss_scale = 1024.0;
  double lr = 1e-3;
};

class CloudConfigBuilder {
 public:
  CloudConfigBuilder& gpu() {
    // BUG(torch-cuda-unguarded): main() builds its config with gpu() and never asks whether CUDA is available.
    cfg_.device = torch::Device(torch::kCUDA);
    return *this;
  }
  CloudConfigBuilder& accumulate(int64_t n) {
    cfg_.accum_steps = n;
    return *this;
  }
  CloudConfigBuilder& learning_rate(double lr) {
    cfg_.lr = lr;
    return *this;
  }
  CloudConfig build() const { return cfg_; }

 private:
  CloudConfig cfg_;
};

// Mean top-of-atmosphere reflectance per band over the training granules.
torch::Tensor band_means() { return torch::tensor({0.09, 0.08, 0.07, 0.22}).view({1, kBands, 1, 1}); }

// A validated, normalised view of a tile's reflectances.
class BandStack {
 public:
  explicit BandStack(const torch::Tensor& bands) : bands_(bands) {
    if (bands.dim() != 4 || bands.size(1) != kBands) throw std::invalid_argument("tile does not hold the four expected bands");
  }
  torch::Tensor normalised() const {
    // OK(torch-device-mismatch): the statistics follow the tile to its device.
    return (bands_ - band_means().to(bands_.device())) / 0.12;
  }

 private:
  torch::Tensor bands_;
};

class AutocastGuard {
 public:
  explicit AutocastGuard(at::ScalarType dtype) : was_on_(S2_AMP_IS_ON()), prev_(S2_AMP_DTYPE()) {
    S2_AMP_SET_DTYPE(dtype);
    S2_AMP(true);
  }
  ~AutocastGuard() {
    S2_AMP(was_on_);
    S2_AMP_SET_DTYPE(prev_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool was_on_;
  at::ScalarType prev_;
};

// What one optimisation step holds while it runs: its precision and a clock.
class StepScope {
 public:
  explicit StepScope(at::ScalarType dtype) : amp_(dtype), start_(std::chrono::steady_clock::now()) {}
  double elapsed_ms() const { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  AutocastGuard amp_;
  std::chrono::steady_clock::time_point start_;
};

struct CloudNetImpl : nn::Module {
  CloudNetImpl()
      : down(register_module("down", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(kBands, 32, 3).padding(1)), nn::BatchNorm2d(32), nn::ReLU(),
                                                    nn::Conv2d(nn::Conv2dOptions(32, 32, 3).padding(1)), nn::ReLU()))),
        mid(register_module("mid", nn::Sequential(nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)),
                                                  nn::BatchNorm2d(64), nn::ReLU(), nn::Dropout2d(0.1)))),
        up(register_module("up", nn::ConvTranspose2d(nn::ConvTranspose2dOptions(64, 32, 2).stride(2)))),
        head(register_module("head", nn::Conv2d(64, kClasses, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto d = down->forward(x);
    return head->forward(torch::cat({d, up->forward(mid->forward(d))}, 1));
  }
  nn::Sequential down, mid;
  nn::ConvTranspose2d up;
  nn::Conv2d head;
};
TORCH_MODULE(CloudNet);

struct Tile {
  torch::Tensor bands;  // B x 4 x 64 x 64 reflectance
  torch::Tensor mask;   // B x 64 x 64 class per pixel
  bool cirrus = false;  // from the granule's quality band
};

std::vector<Tile> make_tiles(int64_t n, int64_t b, torch::Device device) {
  std::vector<Tile> out;
  for (int64_t i = 0; i < n; ++i) {
    auto mask = torch::randint(kClasses - (i % 4 == 0 ? 0 : 1), {b, kSide, kSide}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto bands = 0.1 * torch::rand({b, kBands, kSide, kSide}, device) + 0.2 * (mask == 1).unsqueeze(1).to(torch::kFloat);
    out.push_back({bands, mask, i % 4 == 0});
  }
  return out;
}

class CloudTrainer {
 public:
  CloudTrainer(CloudNet net, const CloudConfig& cfg) : net_(std::move(net)), cfg_(cfg), opt_(net_->parameters(), torch::optim::AdamOptions(cfg.lr)) {}

  void train_epoch(const std::vector<Tile>& tiles) {
    net_->train();
    opt_.zero_grad();
    micro_ = 0;
    for (const auto& t : tiles) {
      // BUG(torch-autocast-region): BandStack's constructor throws on a tile with a missing band; that exit leaves autocast on.
      S2_AMP(true);
      const BandStack stack(t.bands);
      auto loss = criterion_(net_->forward(stack.normalised()), t.mask);
      S2_AMP(false);
      // OK(torch-autocast-region, torch-grad-accumulation-unscaled): scaled for float16 and divided by the accumulation.
      (loss * (cfg_.loss_scale / static_cast<double>(cfg_.accum_steps))).backward();
      if (++micro_ == cfg_.accum_steps) {
        for (auto& p : net_->parameters())
          if (p.grad().defined()) p.grad().div_(cfg_.loss_scale);
        opt_.step();
        opt_.zero_grad();
        micro_ = 0;
      }
    }
  }

  // Thin cirrus is the hard class: a second pass over the tiles that hold it.
  double refine_cirrus(const std::vector<Tile>& tiles) {
    net_->train();
    micro_ = 0;
    double slowest = 0.0;
    for (const auto& t : tiles) {
      if (!t.cirrus) continue;
      StepScope scope(at::kBFloat16);
      auto logits = net_->forward(BandStack(t.bands).normalised());
      auto loss = criterion_(logits, t.mask);
      // BUG(torch-autocast-region): the scope's guard restores autocast only at the closing brace; backward() runs inside the region.
      // BUG(torch-grad-accumulation-unscaled): the step waits for cfg_.accum_steps cirrus tiles and the mean loss is not divided by it.
      loss.backward();
      if (++micro_ == cfg_.accum_steps) {
        opt_.step();
        opt_.zero_grad();
        micro_ = 0;
      }
      slowest = std::max(slowest, scope.elapsed_ms());
    }
    return slowest;
  }

 private:
  CloudNet net_;
  CloudConfig cfg_;
  torch::optim::Adam opt_;
  nn::CrossEntropyLoss criterion_;
  int64_t micro_ = 0;
};

class CloudMasker {
 public:
  CloudMasker(CloudNet net, torch::Device device) : net_(std::move(net)), device_(device), means_(band_means()) {
    net_->to(device_);
    net_->eval();
  }
  torch::Tensor mask(const torch::Tensor& bands) {
    torch::NoGradGuard no_grad;
    // BUG(torch-device-mismatch): means_ was made on the CPU by band_means() in the constructor; the bands are on device_.
    auto x = (bands.to(device_) - means_) / 0.12;
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): the constructor called eval(); guarded above.
    return net_->forward(x).argmax(1);
  }

 private:
  CloudNet net_;
  torch::Device device_;
  torch::Tensor means_;
};

}  // namespace s2

int main() {
  using namespace s2;
  torch::manual_seed(387);
  const CloudConfig cfg = CloudConfigBuilder().gpu().accumulate(4).learning_rate(5e-4).build();
  CloudNet net;
  net->to(cfg.device);
  auto tiles = make_tiles(32, 8, cfg.device);

  CloudTrainer trainer(net, cfg);
  for (int e = 0; e < 3; ++e) {
    try {
      trainer.train_epoch(tiles);
    } catch (const std::invalid_argument& err) {
      std::cerr << "epoch " << e << " stopped: " << err.what() << '\n';
    }
  }
  std::cout << "slowest cirrus step " << trainer.refine_cirrus(tiles) << " ms\n";

  CloudMasker masker(net, cfg.device);
  double cloudy = 0.0;
  const auto archive = make_tiles(8, 8, cfg.device);
  for (const auto& t : archive) cloudy += (masker.mask(t.bands) == 1).to(torch::kFloat).mean().item<double>();
  std::cout << "archive cloud fraction " << cloudy / static_cast<double>(archive.size()) << '\n';
  return 0;
}
