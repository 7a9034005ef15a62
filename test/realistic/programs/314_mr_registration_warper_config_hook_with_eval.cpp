// Deformable registration of brain MR slices (VoxelMorph-style, in 2D): a conv
// net predicts a displacement field from the fixed and moving slices, and a
// spatial transformer warps the moving slice and its tissue labels. Pretraining
// runs under autocast; Dice scores the warped labels; a hard case is refined by
// test-time instance optimisation in float32.
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#if TORCH_VERSION_MAJOR >= 2
#define REG_AMP(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#else
#define REG_AMP(on) at::autocast::set_enabled(on)
#endif

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace reg {

constexpr int64_t kSize = 64, kLabels = 4;
constexpr double kSmoothWeight = 0.02;
// Instance optimisation chases sub-voxel residuals: float16 would round them away.
constexpr bool kAmpInstanceOpt = false;

struct RegConfig {
  bool prefer_gpu = true;
  int64_t log_every = 50;
  std::function<void()> after_case = [] {};  // runs after each validation case
};

torch::Device select_device(const RegConfig &cfg) {
  if (cfg.prefer_gpu && torch::cuda::is_available())
    // OK(torch-cuda-unguarded): under the is_available() test.
    return torch::Device(torch::kCUDA);
  return torch::Device(torch::kCPU);
}
struct Pair {
  torch::Tensor fixed, moving;          // [1, 1, H, W] intensities, on the host
  torch::Tensor fixed_seg, moving_seg;  // [1, 1, H, W] tissue label ids
};

// An elliptic phantom and a shifted copy of it, as the loader delivers them.
Pair synth_pair() {
  auto ys = torch::linspace(-1, 1, kSize).view({1, 1, kSize, 1});
  auto xs = torch::linspace(-1, 1, kSize).view({1, 1, 1, kSize});
  auto r = torch::rand({2}) * 0.3 + 0.4;
  auto shift = (torch::rand({2}) - 0.5) * 0.2;
  auto fixed = torch::exp(-(xs.pow(2) / r[0] + ys.pow(2) / r[1]) * 3.0);
  auto moving = torch::exp(-((xs - shift[0]).pow(2) / r[0] + (ys - shift[1]).pow(2) / r[1]) * 3.0);
  auto labels = [](const torch::Tensor &img) {
    return torch::bucketize(img, torch::tensor({0.2, 0.5, 0.8})).to(torch::kFloat); };
  return {fixed, moving, labels(fixed), labels(moving)};
}

struct FlowNetImpl : nn::Module {
  FlowNetImpl()
      : enc1(register_module("enc1", block(2, 16))), enc2(register_module("enc2", block(16, 32))),
        dec(register_module("dec", block(48, 16))),
        flow(register_module("flow", nn::Conv2d(nn::Conv2dOptions(16, 2, 3).padding(1)))) {}
  static nn::Sequential block(int64_t in, int64_t out) {
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1)), nn::BatchNorm2d(out),
                          nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)));
  }
  torch::Tensor forward(const torch::Tensor &fixed, const torch::Tensor &moving) {
    auto e1 = enc1->forward(torch::cat({fixed, moving}, 1));
    auto e2 = enc2->forward(F::max_pool2d(e1, F::MaxPool2dFuncOptions(2)));
    auto up = F::interpolate(e2, F::InterpolateFuncOptions().scale_factor(std::vector<double>{2, 2}));
    return flow->forward(dec->forward(torch::cat({up, e1}, 1))) * 0.1;
  }
  nn::Sequential enc1, enc2, dec;
  nn::Conv2d flow;
};
TORCH_MODULE(FlowNet);

template <typename Holder>
void place(Holder &module, const torch::Device &device) {
  // OK(torch-tensor-to-discarded): instantiated with a module holder; Module::to moves in place.
  module->to(device);
}

// Spatial transformer: the identity sampling grid plus the predicted displacement.
class Warper {
 public:
  explicit Warper(const torch::Device &device) {
    auto theta = torch::tensor({1.0, 0.0, 0.0, 0.0, 1.0, 0.0}, torch::TensorOptions().device(device)).view({1, 2, 3});
    grid_ = F::affine_grid(theta, {1, 1, kSize, kSize}, false);
  }
  torch::Tensor warp(const torch::Tensor &img, const torch::Tensor &flow, bool labels = false) const {
    // OK(torch-device-mismatch): grid_ was built on the device the registrar hands over, where flow is.
    auto grid = grid_ + flow.permute({0, 2, 3, 1});
    auto opts = F::GridSampleFuncOptions().align_corners(false);
    if (labels)
      opts.mode(torch::kNearest);
    return F::grid_sample(img, grid, opts);
  }

 private:
  torch::Tensor grid_;
};
torch::Tensor smoothness(const torch::Tensor &flow) {
  auto dy = flow.slice(2, 1) - flow.slice(2, 0, -1);
  auto dx = flow.slice(3, 1) - flow.slice(3, 0, -1);
  return dy.pow(2).mean() + dx.pow(2).mean();
}
torch::Tensor similarity(const torch::Tensor &warped, const torch::Tensor &fixed,
                         const std::optional<torch::Tensor> &roi) {
  auto diff = (warped - fixed).pow(2);
  if (roi)
    diff = diff * *roi;
  return diff.mean();
}
// Mean Dice over the tissue labels 1..3.
torch::Tensor dice(const torch::Tensor &warped_seg, const torch::Tensor &fixed_seg) {
  std::vector<torch::Tensor> scores;
  for (int64_t l = 1; l < kLabels; ++l) {
    auto a = warped_seg == l, b = fixed_seg == l;
    // OK(torch-loss-accumulation-graph): counts of comparisons carry no graph.
    scores.push_back(2.0 * (a & b).sum().to(torch::kFloat) / (a.sum() + b.sum()).clamp_min(1).to(torch::kFloat));
  }
  return torch::stack(scores).mean();
}
void clear_grads(nn::Module &m) {
  for (auto &p : m.parameters())
    if (p.grad().defined()) p.grad().zero_();
}
// Runs fn with the module in eval() and autograd off, then restores the mode.
template <typename Fn>
auto with_eval(nn::Module &m, Fn &&fn) {
  const bool was_training = m.is_training();
  m.eval();
  c10::InferenceMode inference;
  auto result = fn();
  m.train(was_training);
  return result;
}

class Registrar {
 public:
  Registrar(FlowNet net, torch::Device device, RegConfig cfg)
      : net_(std::move(net)), device_(device), cfg_(std::move(cfg)), warper_(device_),
        after_case_(cfg_.after_case), opt_(net_->parameters(), torch::optim::AdamOptions(1e-3)) {}

  FlowNet &model() { return net_; }
  double pretrain(const std::vector<Pair> &pairs) {
    net_->train();
    auto loss_sum = torch::zeros({}, device_);
    int64_t step = 0;
    for (const auto &p : pairs) {
      auto fixed = p.fixed.to(device_), moving = p.moving.to(device_);
      opt_.zero_grad();
      REG_AMP(true);
      // OK(torch-eval-mode-missing): train() above.
      auto flow = net_->forward(fixed, moving);
      auto loss = similarity(warper_.warp(moving, flow), fixed, std::nullopt) + kSmoothWeight * smoothness(flow);
      REG_AMP(false);
      // BUG(torch-autocast-region): the loss came out of a float16 region and
      // is back-propagated unscaled: small displacement gradients flush to zero.
      loss.backward();
      opt_.step();
      // OK(torch-loss-accumulation-graph): detached before it joins the sum.
      loss_sum = loss_sum + loss.detach();
      // OK(torch-host-sync-in-loop): the read sits right of && and runs every log_every steps.
      if (++step % cfg_.log_every == 0 && !torch::isfinite(loss).all().item<bool>())
        throw std::runtime_error("non-finite registration loss");
    }
    // OK(torch-host-sync-in-loop): once, after the loop.
    return loss_sum.item<double>() / static_cast<double>(pairs.size());
  }

  double validate(const std::vector<Pair> &pairs) {
    double total = 0.0;
    for (const auto &p : pairs) {
      auto fixed = p.fixed.to(device_), moving = p.moving.to(device_);
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): main() runs validate() through with_eval()
      // on model(): eval() and InferenceMode.
      auto flow = net_->forward(fixed, moving);
      auto warped_seg = warper_.warp(p.moving_seg.to(device_), flow, /*labels=*/true);
      // BUG(torch-device-mismatch): the warped labels are on device_, the
      // fixed labels were never moved off the host.
      total += dice(warped_seg, p.fixed_seg).item<double>();
      after_case_();
    }
    return total / static_cast<double>(pairs.size());
  }

  // Test-time adaptation on one hard pair, within a tissue mask.
  torch::Tensor refine(const Pair &p, int iters) {
    auto fixed = p.fixed.to(device_), moving = p.moving.to(device_);
    std::optional<torch::Tensor> roi = (fixed > 0.05).to(torch::kFloat);
    net_->train();
    for (int it = 0; it < iters; ++it) {
      clear_grads(*net_);
      if (kAmpInstanceOpt)
        REG_AMP(true);
      // OK(torch-eval-mode-missing): train() before the loop.
      auto flow = net_->forward(fixed, moving);
      auto loss = similarity(warper_.warp(moving, flow), fixed, roi) + kSmoothWeight * smoothness(flow);
      if (kAmpInstanceOpt)
        REG_AMP(false);
      // OK(torch-autocast-region): kAmpInstanceOpt is false, autocast never turns on here.
      loss.backward();
      // OK(torch-missing-zero-grad): clear_grads() zeroes every .grad() at the top of the iteration.
      opt_.step();
    }
    net_->eval();
    torch::NoGradGuard no_grad;
    // OK(torch-eval-mode-missing): eval() just above.
    return net_->forward(fixed, moving);
  }

 private:
  FlowNet net_;
  torch::Device device_;
  RegConfig cfg_;
  Warper warper_;
  std::function<void()> after_case_;
  torch::optim::Adam opt_;
};

}  // namespace reg

int main() {
  torch::manual_seed(314);
  reg::RegConfig cfg;
  cfg.after_case = [] {
    if (torch::cuda::is_available())
      // BUG(torch-empty-cache-in-loop): validate() runs this hook after every
      // case; each call syncs and hands the blocks the next case needs back.
      c10::cuda::CUDACachingAllocator::emptyCache();
  };
  const torch::Device device = reg::select_device(cfg);
  std::vector<reg::Pair> train, val;
  for (int i = 0; i < 172; ++i)
    (i < 160 ? train : val).push_back(reg::synth_pair());

  reg::FlowNet net;
  reg::place(net, device);
  reg::Registrar registrar(net, device, cfg);
  for (int epoch = 0; epoch < 6; ++epoch) {
    const double loss = registrar.pretrain(train);
    const double mean_dice = reg::with_eval(*registrar.model(), [&] { return registrar.validate(val); });
    std::cout << "epoch " << epoch << " loss " << loss << " Dice " << mean_dice << '\n';
  }
  if (device.is_cuda())
    // OK(torch-empty-cache-in-loop): once, after pretraining.
    c10::cuda::CUDACachingAllocator::emptyCache();

  auto field = registrar.refine(val.front(), 50);
  std::cout << "refined max displacement " << field.abs().max().item<double>() * reg::kSize / 2 << " px\n";
}
