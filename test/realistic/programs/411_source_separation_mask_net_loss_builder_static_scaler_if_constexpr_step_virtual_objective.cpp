// Vocal / accompaniment separation: a 1-D conv net predicts two soft masks over
// a magnitude spectrogram. A builder-made loss functor (pre-divided for
// accumulation), a static float16 loss scaler, a step template instantiated
// with and without autocast, a virtual room-adaptation objective.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
namespace nn = torch::nn;
namespace F = torch::nn::functional;
#if TORCH_VERSION_MAJOR >= 2
#define SEP_AUTOCAST(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#define SEP_AUTOCAST_ON() at::autocast::is_autocast_enabled(at::kCUDA)
#define SEP_AUTOCAST_GET_DTYPE() at::autocast::get_autocast_dtype(at::kCUDA)
#define SEP_AUTOCAST_DTYPE(t) at::autocast::set_autocast_dtype(at::kCUDA, (t))
#else
#define SEP_AUTOCAST(on) at::autocast::set_enabled(on)
#define SEP_AUTOCAST_ON() at::autocast::is_enabled()
#define SEP_AUTOCAST_GET_DTYPE() at::autocast::get_autocast_gpu_dtype()
#define SEP_AUTOCAST_DTYPE(t) at::autocast::set_autocast_gpu_dtype(t)
#endif
constexpr int64_t kBins = 257, kSources = 2;
// Saves the flag and the dtype as a pair, puts both back on destruction.
class AmpGuard {
 public:
  explicit AmpGuard(at::ScalarType dtype) : saved_(SEP_AUTOCAST_ON(), SEP_AUTOCAST_GET_DTYPE()) {
    SEP_AUTOCAST_DTYPE(dtype);
    SEP_AUTOCAST(true);
  }
  ~AmpGuard() {
    SEP_AUTOCAST(saved_.first);
    SEP_AUTOCAST_DTYPE(saved_.second);
  }
 private:
  std::pair<bool, at::ScalarType> saved_;
};
// Static loss scale; an overflowed gradient entry is zeroed rather than
// poisoning Adam's moments (no host round trip per step).
class LossScaler {
 public:
  explicit LossScaler(double scale) : scale_(scale) {}
  torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }
  void unscale_(const std::vector<torch::Tensor>& params) const {
    for (const auto& p : params)
      if (p.grad().defined())
        p.mutable_grad().div_(scale_).nan_to_num_(0.0, 0.0, 0.0);
  }
 private:
  double scale_;
};
struct MaskNetImpl : nn::Module {
  MaskNetImpl()
      : net(register_module("net", nn::Sequential(nn::Conv1d(nn::Conv1dOptions(kBins, 256, 5).padding(2)), nn::ReLU(),
                                                  nn::Dropout(0.1), nn::Conv1d(nn::Conv1dOptions(256, 256, 5).padding(2)),
                                                  nn::ReLU(), nn::Conv1d(nn::Conv1dOptions(256, kSources * kBins, 1))))) {}
  // mix [B, F, T] -> estimated magnitudes [B, S, F, T]
  torch::Tensor forward(const torch::Tensor& mix) {
    auto masks = torch::sigmoid(net->forward(mix)).view({mix.size(0), kSources, kBins, mix.size(2)});
    return masks * mix.unsqueeze(1);
  }
  nn::Sequential net;
};
TORCH_MODULE(MaskNet);
struct Excerpt { torch::Tensor mix, sources; };  // [B, F, T], [B, S, F, T]
class MagnitudeLoss {
 public:
  class Builder {
   public:
    Builder& accumulate(int64_t n) { accum_ = n; return *this; }
    Builder& vocal_weight(double w) { vocal_ = w; return *this; }
    MagnitudeLoss build() const { return MagnitudeLoss(accum_, vocal_); }
   private:
    int64_t accum_ = 1; double vocal_ = 1.0;
  };
  torch::Tensor operator()(const torch::Tensor& est, const torch::Tensor& ref) const {
    auto per_source = (est - ref).abs().mean({0, 2, 3});
    return (vocal_ * per_source[0] + per_source[1]) / static_cast<double>(accum_);
  }
 private:
  MagnitudeLoss(int64_t accum, double vocal) : accum_(accum), vocal_(vocal) {}
  int64_t accum_; double vocal_;
};
void train_accumulated(MaskNet& net, const std::vector<Excerpt>& data, const MagnitudeLoss& loss_fn, int64_t accum) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(3e-4));
  opt.zero_grad();
  for (size_t i = 0; i < data.size(); ++i) {
    auto loss = loss_fn(net->forward(data[i].mix), data[i].sources);
    // OK(torch-grad-accumulation-unscaled): the builder's functor divides by accum.
    loss.backward();
    if ((i + 1) % accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}
void train_fp16_scaled(MaskNet& net, const std::vector<Excerpt>& data, const LossScaler& scaler) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(3e-4));
  for (const auto& ex : data) {
    opt.zero_grad();
    std::optional<AmpGuard> amp(std::in_place, at::kHalf);
    auto loss = F::l1_loss(net->forward(ex.mix), ex.sources);
    amp.reset();
    // OK(torch-autocast-region): region ended at amp.reset(); the loss is scaled.
    scaler.scale(loss).backward();
    scaler.unscale_(net->parameters());
    opt.step();
  }
}
template <bool kAmp>
void separation_step(MaskNet& net, torch::optim::Optimizer& opt, const Excerpt& ex, const LossScaler& scaler) {
  opt.zero_grad();
  torch::Tensor loss;
  {
    std::optional<AmpGuard> amp;
    if constexpr (kAmp)
      amp.emplace(at::kHalf);
    loss = F::mse_loss(net->forward(ex.mix), ex.sources);
  }
  if constexpr (kAmp) {
    // OK(torch-autocast-region): the float16 instantiation scales its loss.
    scaler.scale(loss).backward();
    scaler.unscale_(net->parameters());
  } else {
    // OK(torch-autocast-region): only the float32 instantiation gets here.
    loss.backward();
  }
  opt.step();
}
void train_with_step(MaskNet& net, const std::vector<Excerpt>& data, bool amp, const LossScaler& scaler) {
  net->train();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(1e-2).momentum(0.9));
  for (const auto& ex : data) {
    if (amp)
      separation_step<true>(net, opt, ex, scaler);
    else
      separation_step<false>(net, opt, ex, scaler);
  }
}
// Karaoke fine-tuning on the studio's own stems, 8 excerpts per update.
void finetune_karaoke(MaskNet& net, const std::vector<Excerpt>& stems, int64_t accum) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-4));
  opt.zero_grad();
  int64_t micro = 0;
  for (const auto& ex : stems) {
    torch::Tensor loss;
    {
      AmpGuard amp(at::kBFloat16);
      loss = F::smooth_l1_loss(net->forward(ex.mix), ex.sources);
    }
    // OK(torch-autocast-region): bfloat16, closed before backward().
    // BUG(torch-grad-accumulation-unscaled): a mean loss; `accum` of them per step.
    loss.backward();
    if (++micro < accum)
      continue;
    micro = 0;
    opt.step();
    opt.zero_grad();
  }
}
struct SeparationObjective {
  virtual ~SeparationObjective() = default;
  virtual torch::Tensor compute(const torch::Tensor& est, const torch::Tensor& ref) const = 0;
};
struct MagnitudeL1 : SeparationObjective {
  torch::Tensor compute(const torch::Tensor& est, const torch::Tensor& ref) const override { return F::l1_loss(est, ref); }
};
struct LogSpectralMse : SeparationObjective {
  torch::Tensor compute(const torch::Tensor& est, const torch::Tensor& ref) const override {
    return F::mse_loss(torch::log1p(est), torch::log1p(ref));
  }
};
std::unique_ptr<SeparationObjective> make_objective(const std::string& name) {
  if (name == "log_mse")
    return std::make_unique<LogSpectralMse>();
  return std::make_unique<MagnitudeL1>();
}
void adapt_to_room(MaskNet& net, const std::vector<Excerpt>& room, const SeparationObjective& objective) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(5e-5));
  for (const auto& ex : room) {
    opt.zero_grad();
    torch::Tensor loss;
    {
      AmpGuard amp(at::kHalf);
      loss = objective.compute(net->forward(ex.mix), ex.sources);
    }
    // BUG(torch-autocast-region): both overrides return a mean loss, float16 here, unscaled.
    loss.backward();
    opt.step();
  }
}
void check_mixture(const torch::Tensor& mix) {
  if (mix.dim() != 3 || mix.size(1) != kBins)
    throw std::invalid_argument("expected a [B, 257, T] magnitude spectrogram");
}
torch::Tensor separate_clip(MaskNet& net, const torch::Tensor& mix) {
  torch::NoGradGuard no_grad;
  // BUG(torch-autocast-region): check_mixture() throws and leaves autocast on.
  SEP_AUTOCAST(true);
  check_mixture(mix);
  auto est = net->forward(mix).to(torch::kFloat);
  SEP_AUTOCAST(false);
  return est;
}
std::vector<torch::Tensor> separate_stream(MaskNet& net, const std::vector<torch::Tensor>& chunks, bool amp_on) {
  torch::NoGradGuard no_grad;
  std::optional<AmpGuard> amp;
  // OK(torch-autocast-region): the guard restores autocast on the early return.
  if (amp_on)
    amp.emplace(at::kHalf);
  std::vector<torch::Tensor> out;
  if (chunks.empty())
    return out;
  for (const auto& c : chunks)
    out.push_back(net->forward(c).to(torch::kFloat));
  return out;
}
std::vector<Excerpt> make_excerpts(int64_t n, torch::Device device) {
  std::vector<Excerpt> out;
  for (int64_t i = 0; i < n; ++i) {
    auto sources = torch::rand({4, kSources, kBins, 128}, device);
    out.push_back({sources.sum(1), sources});
  }
  return out;
}
int main(int argc, char** argv) {
  torch::manual_seed(411);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  const bool amp = device.is_cuda();
  MaskNet net;
  net->to(device);
  auto data = make_excerpts(80, device);
  const LossScaler scaler(32768.0);
  train_accumulated(net, data, MagnitudeLoss::Builder().accumulate(4).vocal_weight(2.0).build(), 4);
  if (amp)
    train_fp16_scaled(net, data, scaler);
  train_with_step(net, data, amp, scaler);
  finetune_karaoke(net, make_excerpts(16, device), 8);
  auto objective = make_objective(argc > 1 ? argv[1] : "l1");
  adapt_to_room(net, make_excerpts(8, device), *objective);
  net->eval();
  auto clip = separate_clip(net, data.front().mix);
  std::cout << "vocal energy " << clip.select(1, 0).pow(2).mean().item<double>() << '\n';
  std::vector<torch::Tensor> chunks;
  for (int i = 0; i < 6; ++i)
    chunks.push_back(torch::rand({1, kBins, 64}, device));
  std::cout << "separated " << separate_stream(net, chunks, amp).size() << " chunks\n";
}
