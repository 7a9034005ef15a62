// Stem separation for a remixing app: a small U-Net predicts four soft masks
// (vocals, drums, bass, other) over the mixture's magnitude spectrogram, in
// CUDA autocast through the project's AmpSession (built with the run's
// precision, opened and closed around each forward). A critic, updated twice
// per separator update, sharpens the vocals; the exporter bounces stems.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define SEP_AUTOCAST(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#else
#define SEP_AUTOCAST(on) at::autocast::set_enabled(on)
#endif

constexpr int64_t kStems = 4, kBins = 128, kFrames = 64;
const std::array<const char*, kStems> kStemNames = {"vocals", "drums", "bass", "other"};

struct SepConfig {
  double lr = 5e-4, adv_weight = 0.01;
  int64_t critic_updates = 2, log_every = 25;  // critic steps per separator step; progress bar period
};

// Opens and closes CUDA autocast regions at the precision chosen for the run.
class AmpSession {
 public:
  explicit AmpSession(at::ScalarType dtype) : dtype_(dtype) {}
  void open() const {
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_dtype(at::kCUDA, dtype_);
#else
    at::autocast::set_autocast_gpu_dtype(dtype_);
#endif
    SEP_AUTOCAST(true);
  }
  void close() const { SEP_AUTOCAST(false); }
 private:
  at::ScalarType dtype_;
};

struct MaskNetImpl : nn::Module {
  MaskNetImpl()
      : down(register_module("down", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::BatchNorm2d(32),
                                                    nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)),
                                                    nn::BatchNorm2d(64), nn::ReLU()))),
        up(register_module("up", nn::Sequential(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(64, 32, 4).stride(2).padding(1)),
                                                nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(32, kStems, 1))))) {}
  // mixture magnitude [B, 1, F, T] -> masks [B, 4, F, T]
  torch::Tensor forward(const torch::Tensor& mix) { return torch::sigmoid(up->forward(down->forward(mix))); }
  nn::Sequential down, up;
};
TORCH_MODULE(MaskNet);

struct CriticImpl : nn::Module {
  CriticImpl()
      : net(register_module("net", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(2, 32, 5).stride(2).padding(2)), nn::LeakyReLU(),
                                                  nn::Conv2d(nn::Conv2dOptions(32, 64, 5).stride(2).padding(2)), nn::LeakyReLU(),
                                                  nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(64, 1)))) {}
  // (mixture, vocal estimate) -> realism logit
  torch::Tensor forward(const torch::Tensor& mix, const torch::Tensor& vocals) { return net->forward(torch::cat({mix, vocals}, 1)); }
  nn::Sequential net;
};
TORCH_MODULE(Critic);

enum class Layout { kFourStem, kKaraoke, kAcapella };

struct Excerpt {
  torch::Tensor mix, stems;  // [B, 1, F, T], [B, 4, F, T]
  Layout layout = Layout::kFourStem;
};

// Smoothed loss for the progress bar: the mean of the last 16 steps.
class LossWindow {
 public:
  void push(const torch::Tensor& loss) {
    if (!sum_.defined()) {
      sum_ = torch::zeros_like(loss);
      ring_.fill(torch::zeros_like(loss));
    }
    // BUG(torch-loss-accumulation-graph): the trainer pushes the live loss;
    // sum_ lives in the trainer and chains every step's graph.
    sum_ += loss;
    sum_ -= ring_[pos_];
    ring_[pos_] = loss.detach();
    pos_ = (pos_ + 1) % ring_.size();
    filled_ = std::min(filled_ + 1, ring_.size());
  }
  double mean() const { return sum_.item<double>() / static_cast<double>(filled_); }
 private:
  std::array<torch::Tensor, 16> ring_;
  torch::Tensor sum_;
  size_t pos_ = 0, filled_ = 0;
};

class SeparatorTrainer {
 public:
  SeparatorTrainer(MaskNet net, const AmpSession& amp, const SepConfig& cfg, torch::Device device)
      : net_(std::move(net)), amp_(amp), cfg_(cfg), opt_(net_->parameters(), torch::optim::AdamOptions(cfg.lr)) {
    stem_totals_.fill(torch::zeros({}, device));
  }
  void epoch(const std::vector<Excerpt>& data) {
    net_->train();
    int64_t step = 0;
    for (const auto& ex : data) {
      opt_.zero_grad();
      amp_.open();
      auto est = net_->forward(ex.mix) * ex.mix;
      auto loss = F::l1_loss(est, ex.stems);
      std::array<torch::Tensor, kStems> per_stem;
      for (int64_t s = 0; s < kStems; ++s)
        per_stem[s] = F::l1_loss(est.select(1, s), ex.stems.select(1, s));
      amp_.close();
      // BUG(torch-autocast-region): main() built this session with at::kHalf;
      // the L1 loss of the float16 region reaches backward() unscaled.
      loss.backward();
      opt_.step();
      for (int64_t s = 0; s < kStems; ++s) {
        // BUG(torch-loss-accumulation-graph): the per-stem totals are a member
        // array; each element keeps every step's graph.
        stem_totals_[s] += per_stem[s];
      }
      window_.push(loss);
      if (++step % cfg_.log_every == 0)
        std::cout << "step " << step << " smoothed L1 " << window_.mean() << '\n';
    }
  }
  void report(int64_t batches) const {
    for (int64_t s = 0; s < kStems; ++s)
      std::cout << kStemNames[s] << ": " << stem_totals_[s].item<double>() / static_cast<double>(batches) << '\n';
  }
 private:
  MaskNet net_;
  const AmpSession& amp_;
  SepConfig cfg_;
  torch::optim::Adam opt_;
  std::array<torch::Tensor, kStems> stem_totals_;
  LossWindow window_;
};

// Vocal fine-tune on the studio multitracks.
void finetune_vocals(MaskNet& net, const AmpSession& amp, const std::vector<Excerpt>& studio, double lr) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(lr));
  for (const auto& ex : studio) {
    opt.zero_grad();
    amp.open();
    auto vocals = net->forward(ex.mix).narrow(1, 0, 1) * ex.mix;
    auto loss = F::mse_loss(vocals, ex.stems.narrow(1, 0, 1));
    amp.close();
    // OK(torch-autocast-region): main() hands this function the bfloat16 session.
    loss.backward();
    opt.step();
  }
}

void adversarial_stage(MaskNet& sep, Critic& critic, const std::vector<Excerpt>& data, const SepConfig& cfg) {
  sep->train();
  critic->train();
  torch::optim::Adam g_opt(sep->parameters(), torch::optim::AdamOptions(cfg.lr * 0.1).betas({0.5, 0.999}));
  torch::optim::Adam d_opt(critic->parameters(), torch::optim::AdamOptions(cfg.lr).betas({0.5, 0.999}));
  for (const auto& ex : data) {
    auto vocals = sep->forward(ex.mix).narrow(1, 0, 1) * ex.mix;
    auto ref = ex.stems.narrow(1, 0, 1);
    d_opt.zero_grad();
    for (int64_t k = 0; k < cfg.critic_updates; ++k) {
      auto real = critic->forward(ex.mix, ref);
      auto fake = critic->forward(ex.mix, vocals.detach());
      auto d_loss = F::binary_cross_entropy_with_logits(real, torch::ones_like(real)) +
                    F::binary_cross_entropy_with_logits(fake, torch::zeros_like(fake));
      d_loss.backward();
      // BUG(torch-missing-zero-grad): one reset before the critic loop; the
      // second critic update applies the first one's gradients again.
      d_opt.step();
    }
    g_opt.zero_grad();
    auto judged = critic->forward(ex.mix, vocals);
    auto g_loss = F::l1_loss(vocals, ref) + cfg.adv_weight * F::binary_cross_entropy_with_logits(judged, torch::ones_like(judged));
    // OK(torch-missing-zero-grad): g_opt was reset just above.
    g_loss.backward();
    g_opt.step();
  }
}

std::vector<torch::Tensor> bounce_stems(MaskNet& net, const std::vector<Excerpt>& uploads) {
  torch::NoGradGuard no_grad;
  net->eval();
  std::vector<torch::Tensor> out;
  // OK(torch-autocast-region): this return comes before the region opens.
  if (uploads.empty())
    return out;
  // BUG(torch-autocast-region): an "acapella" request throws out of the loop
  // below and leaves the exporter's thread in autocast.
  SEP_AUTOCAST(true);
  for (const auto& up : uploads) {
    auto masks = net->forward(up.mix);
    switch (up.layout) {
      case Layout::kFourStem:
        out.push_back((masks * up.mix).to(torch::kFloat));
        break;
      case Layout::kKaraoke:
        out.push_back(((1.0 - masks.narrow(1, 0, 1)) * up.mix).to(torch::kFloat));
        break;
      default:
        throw std::invalid_argument("bounce: unsupported stem layout");
    }
  }
  SEP_AUTOCAST(false);
  return out;
}

Layout parse_layout(const std::string& request) {
  return request == "karaoke" ? Layout::kKaraoke : request == "acapella" ? Layout::kAcapella : Layout::kFourStem;
}

std::vector<Excerpt> synth(int64_t n, torch::Device device, Layout layout = Layout::kFourStem) {
  std::vector<Excerpt> out;
  for (int64_t i = 0; i < n; ++i) {
    auto stems = torch::rand({8, kStems, kBins, kFrames}, device);
    out.push_back({stems.sum(1, /*keepdim=*/true), stems, layout});
  }
  return out;
}

int main(int argc, char** argv) {
  torch::manual_seed(340);
  // OK(torch-cuda-unguarded): guarded selection.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  SepConfig cfg;
  MaskNet net;
  Critic critic;
  net->to(device);
  critic->to(device);
  const AmpSession half(at::kHalf);
  const AmpSession bf16(at::kBFloat16);
  SeparatorTrainer trainer(net, half, cfg, device);
  auto data = synth(40, device);
  trainer.epoch(data);
  trainer.report(static_cast<int64_t>(data.size()));
  finetune_vocals(net, bf16, synth(10, device), cfg.lr * 0.2);
  adversarial_stage(net, critic, synth(10, device), cfg);
  std::vector<Excerpt> uploads;
  for (int i = 1; i < argc; ++i)
    uploads.push_back(synth(1, device, parse_layout(argv[i])).front());
  auto stems = bounce_stems(net, uploads);
  std::cout << "bounced " << stems.size() << " mixes\n";
}
