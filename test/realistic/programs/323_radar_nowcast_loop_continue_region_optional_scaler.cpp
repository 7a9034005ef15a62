// Precipitation nowcasting for a regional weather service: from the last four
// 5-minute radar reflectivity frames (a 64x64 km crop, dBZ scaled to [0, 1]) a
// small conv encoder-decoder predicts the next frame; the 30-minute product
// feeds six predictions back in turn. Pretraining on the radar archive runs
// in bfloat16 autocast with gradient accumulation (sequences hit by a radar
// outage are skipped); a fine-tune on convective events (hail, cloudbursts)
// runs in float16 with an optional static loss scale, and a refinement adds
// a mass-conservation penalty. Works with LibTorch 1.13 and 2.x.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <deque>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

namespace nn = torch::nn;

#if TORCH_VERSION_MAJOR >= 2
#define NC_AMP(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#define NC_AMP_DTYPE(dt) at::autocast::set_autocast_dtype(at::kCUDA, (dt))
#else
#define NC_AMP(on) at::autocast::set_enabled(on)
#define NC_AMP_DTYPE(dt) at::autocast::set_autocast_gpu_dtype(dt)
#endif

constexpr int64_t kPast = 4, kSide = 64, kLeads = 6;

struct Schedule {
  int64_t epochs = 2;
  int64_t accum_frames = 4;  // sequences per optimizer step in pretraining
};

struct NowcastConfig {
  Schedule schedule;
  double lr = 3e-4;
  double loss_scale = 0.0;  // static loss scale for float16; 0 = off
  double mass_weight = 0.1;
};

struct RadarNetImpl : nn::Module {
  RadarNetImpl()
      : enc(register_module("enc", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(kPast, 32, 3).padding(1)), nn::BatchNorm2d(32),
                                                  nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)),
                                                  nn::BatchNorm2d(64), nn::ReLU()))),
        drop(register_module("drop", nn::Dropout2d(0.1))),
        dec(register_module("dec", nn::Sequential(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(64, 32, 4).stride(2).padding(1)),
                                                  nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(32, 1, 3).padding(1))))) {}
  // past [B, 4, H, W] -> next frame [B, 1, H, W]
  torch::Tensor forward(const torch::Tensor& past) { return torch::sigmoid(dec->forward(drop->forward(enc->forward(past)))); }

  nn::Sequential enc;
  nn::Dropout2d drop;
  nn::Sequential dec;
};
TORCH_MODULE(RadarNet);

struct RadarSeq {
  torch::Tensor past, next;  // [B, 4, H, W], [B, 1, H, W]
  int64_t missing_frames = 0;
};

struct TrainStats {
  std::deque<torch::Tensor> window;  // recent losses for the plateau detector
};

struct LossScaler {
  double factor;
  torch::Tensor scale(const torch::Tensor& loss) const { return loss * factor; }
  void unscale(const std::vector<torch::Tensor>& params) const {
    for (const auto& p : params)
      if (p.grad().defined())
        p.grad().div_(factor);
  }
};

void pretrain(RadarNet& net, const std::vector<RadarSeq>& archive, const NowcastConfig& cfg, TrainStats& stats) {
  net->train();
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(cfg.lr));
  opt.zero_grad();
  NC_AMP_DTYPE(at::kBFloat16);
  int64_t micro = 0;
  for (int64_t epoch = 0; epoch < cfg.schedule.epochs; ++epoch)
    for (const auto& seq : archive) {
      // BUG(torch-autocast-region): [probe: `continue`, not a return] an
      // outage sequence skips NC_AMP(false); when it is the last one, the
      // function returns with autocast on.
      NC_AMP(true);
      if (seq.missing_frames > 0)
        continue;
      auto loss = torch::mse_loss(net->forward(seq.past), seq.next);
      NC_AMP(false);
      // OK(torch-autocast-region): a bfloat16 region needs no loss scale.
      // BUG(torch-grad-accumulation-unscaled): cfg.schedule.accum_frames
      // sequences add up before each step; the mean loss is not divided.
      loss.backward();
      // BUG(torch-loss-accumulation-graph): the window outlives the step and
      // keeps each loss's graph alive.
      stats.window.push_back(loss);
      if (stats.window.size() > 50)
        stats.window.pop_front();
      if (++micro % cfg.schedule.accum_frames == 0) {
        opt.step();
        opt.zero_grad();
      }
    }
}

class ConvectiveFineTuner {
 public:
  ConvectiveFineTuner(RadarNet net, const NowcastConfig& cfg)
      : net_(std::move(net)), cfg_(cfg), opt_(net_->parameters(), torch::optim::AdamWOptions(cfg.lr * 0.1)) {
    if (cfg.loss_scale > 0.0)
      scaler_ = LossScaler{cfg.loss_scale};
  }

  void run(const std::vector<RadarSeq>& events) {
    net_->train();
    NC_AMP_DTYPE(at::kHalf);
    for (const auto& seq : events) {
      opt_.zero_grad();
      NC_AMP(true);
      auto loss = torch::mse_loss(net_->forward(seq.past), seq.next);
      NC_AMP(false);
      if (scaler_) {
        // OK(torch-autocast-region): scaled, and unscaled before the step.
        scaler_->scale(loss).backward();
        scaler_->unscale(net_->parameters());
      } else {
        // BUG(torch-autocast-region): the region is float16 and the default
        // config (loss_scale = 0) takes this unscaled branch.
        loss.backward();
      }
      opt_.step();
    }
  }

  // Adds the mass-conservation penalty: the rain total should follow the
  // last observed frame.
  void refine_mass(const std::vector<RadarSeq>& events) {
    net_->train();
    const double scale = 1024.0;
    NC_AMP_DTYPE(at::kHalf);
    for (const auto& seq : events) {
      opt_.zero_grad();
      NC_AMP(true);
      auto pred = net_->forward(seq.past);
      auto fit = torch::mse_loss(pred, seq.next) * scale;
      auto mass = (pred.sum({1, 2, 3}) - seq.past.select(1, kPast - 1).sum({1, 2})).abs().mean() * (cfg_.mass_weight * scale);
      // BUG(torch-autocast-region): both losses are back-propagated before
      // NC_AMP(false) below.
      torch::autograd::backward({fit, mass});
      NC_AMP(false);
      for (auto& p : net_->parameters())
        if (p.grad().defined())
          p.grad().div_(scale);
      opt_.step();
    }
  }

 private:
  RadarNet net_;
  NowcastConfig cfg_;
  torch::optim::AdamW opt_;
  std::optional<LossScaler> scaler_;
};

// The 30-minute product: six 5-minute steps, each fed back as input.
std::vector<torch::Tensor> rollout(const std::shared_ptr<RadarNetImpl>& net, torch::Tensor past) {
  std::vector<torch::Tensor> frames;
  for (int64_t lead = 0; lead < kLeads; ++lead) {
    // BUG(torch-inference-without-no-grad): no guard; the graph of all six
    // steps is recorded for a backward that never comes.
    auto next = net->forward(past);
    // OK(torch-loss-accumulation-graph): the frames are returned, and no
    // backward() runs here.
    frames.push_back(next);
    past = torch::cat({past.narrow(1, 1, kPast - 1), next}, 1);
  }
  return frames;
}

std::vector<RadarSeq> synth_radar(int64_t n, int64_t batch, torch::Device device) {
  std::vector<RadarSeq> out;
  for (int64_t i = 0; i < n; ++i) {
    auto frames = torch::rand({batch, kPast + 1, kSide, kSide}, device);
    out.push_back({frames.narrow(1, 0, kPast), frames.narrow(1, kPast, 1), i % 9 == 8 ? 1 : 0});
  }
  return out;
}

int main() {
  torch::manual_seed(323);
  const NowcastConfig cfg;
  // OK(torch-cuda-unguarded): guarded selection.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  RadarNet net;
  net->to(device);

  TrainStats stats;
  pretrain(net, synth_radar(36, 8, device), cfg, stats);
  if (!stats.window.empty())
    std::cout << "pretrain plateau loss " << torch::stack(std::vector<torch::Tensor>(stats.window.begin(), stats.window.end())).mean().item<double>() << '\n';

  ConvectiveFineTuner tuner(net, cfg);
  auto events = synth_radar(12, 4, device);
  tuner.run(events);
  tuner.refine_mass(events);

  net->eval();
  auto frames = rollout(net.ptr(), torch::rand({1, kPast, kSide, kSide}, device));
  std::cout << "30-min max reflectivity " << frames.back().max().item<double>() << '\n';
}
