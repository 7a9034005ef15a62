// Piano transcription in the style of Onsets and Frames: log-mel frames go
// through a conv stack with onset, frame (fed the onset probabilities) and
// sustain-pedal heads. The trainer counts micro-batches with a StepClock
// member; the pedal head is fine-tuned under a CastRegion, an autocast scope
// that saves the previous state into an amp::Snapshot; the onset detector of
// the MIDI export saves and restores that state by hand.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <cstdint>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;
constexpr int64_t kMels = 229, kKeys = 88, kFrames = 160, kMinFrames = 8;

#if TORCH_VERSION_MAJOR >= 2
#define TRANSCRIBE_AMP(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#else
#define TRANSCRIBE_AMP(on) at::autocast::set_enabled(on)
#endif

namespace amp {
struct Snapshot { bool enabled; at::ScalarType dtype; };
inline Snapshot save() {
#if TORCH_VERSION_MAJOR >= 2
  return {at::autocast::is_autocast_enabled(at::kCUDA), at::autocast::get_autocast_dtype(at::kCUDA)};
#else
  return {at::autocast::is_enabled(), at::autocast::get_autocast_gpu_dtype()};
#endif
}
inline void use_dtype(at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
  at::autocast::set_autocast_gpu_dtype(dtype);
#endif
}
inline void restore(const Snapshot& s) {
  use_dtype(s.dtype);
  TRANSCRIBE_AMP(s.enabled);
}
}  // namespace amp

// Autocast in `dtype` for the scope of the object.
class CastRegion {
 public:
  explicit CastRegion(at::ScalarType dtype) : saved_(amp::save()), retyped_(dtype != saved_.dtype) {
    if (retyped_) amp::use_dtype(dtype);
    TRANSCRIBE_AMP(true);
  }
  ~CastRegion() {
    if (retyped_) {
      amp::use_dtype(saved_.dtype);
      return;
    }
    TRANSCRIBE_AMP(saved_.enabled);
  }
 private:
  amp::Snapshot saved_;
  bool retyped_;
};

struct Heads { torch::Tensor onset, frame, pedal; };  // logits [B, T, 88], [B, T, 88], [B, T]

struct OnsetsFramesImpl : nn::Module {
  OnsetsFramesImpl()
      : conv(register_module("conv", nn::Sequential(nn::Conv1d(nn::Conv1dOptions(kMels, 256, 3).padding(1)),
                                                    nn::BatchNorm1d(256), nn::ReLU(), nn::Dropout(0.25)))),
        onset(register_module("onset", nn::Linear(256, kKeys))),
        frame(register_module("frame", nn::Linear(256 + kKeys, kKeys))),
        pedal(register_module("pedal", nn::Linear(256, 1))) {}
  Heads forward(const torch::Tensor& mel) {
    auto h = conv->forward(mel).transpose(1, 2);
    auto on = onset(h);
    auto fr = frame(torch::cat({h, torch::sigmoid(on).detach()}, 2));
    return {on, fr, pedal(h).squeeze(2)};
  }
  nn::Sequential conv;
  nn::Linear onset, frame, pedal;
};
TORCH_MODULE(OnsetsFrames);

struct Excerpt { torch::Tensor mel, onsets, frames, pedal; };

std::vector<Excerpt> make_excerpts(int64_t n, int64_t batch, torch::Device device) {
  std::vector<Excerpt> out;
  auto opts = torch::TensorOptions().device(device);
  for (int64_t i = 0; i < n; ++i) {
    auto frames = (torch::rand({batch, kFrames, kKeys}, opts) < 0.05).to(torch::kFloat);
    auto onsets = frames * (torch::rand({batch, kFrames, kKeys}, opts) < 0.3).to(torch::kFloat);
    auto mel = torch::randn({batch, kMels, kFrames}, opts) + frames.mean(2).unsqueeze(1);
    out.push_back({mel, onsets, frames, (torch::rand({batch, kFrames}, opts) < 0.4).to(torch::kFloat)});
  }
  return out;
}

// Onset loss plus frame loss, each averaged over keys and frames.
struct OnsetFrameLoss {
  torch::Tensor operator()(const Heads& h, const Excerpt& x) const {
    return F::binary_cross_entropy_with_logits(h.onset, x.onsets) + F::binary_cross_entropy_with_logits(h.frame, x.frames);
  }
};

class StepClock {
 public:
  explicit StepClock(int64_t every) : every_(every) {}
  void tick() { ++seen_; }
  bool due() const { return seen_ >= every_; }
  void restart() { seen_ = 0; }
 private:
  int64_t every_, seen_ = 0;
};
class Transcriber {
 public:
  Transcriber(OnsetsFrames net, int64_t accum)
      : net_(std::move(net)), opt_(net_->parameters(), torch::optim::AdamOptions(6e-4)), clock_(accum) {}
  void fit(const std::vector<Excerpt>& data, int epochs) {
    net_->train();
    for (int epoch = 0; epoch < epochs; ++epoch) {
      for (const auto& x : data)
        train_step(x);
      std::cout << "epoch " << epoch << " loss " << torch::stack(window_).mean().item<double>() << '\n';
      window_.clear();
    }
  }
 private:
  void train_step(const Excerpt& x) {
    auto loss = criterion_(net_->forward(x.mel), x);
    // BUG(torch-grad-accumulation-unscaled): apply_update() runs only when
    // clock_.due(), and the sum of two mean losses is never divided.
    loss.backward();
    // BUG(torch-loss-accumulation-graph): the member window keeps every
    // step's graph until the end of the epoch.
    window_.push_back(loss);
    clock_.tick();
    if (clock_.due())
      apply_update();
  }

  void apply_update() {
    opt_.step();
    opt_.zero_grad();
    clock_.restart();
  }

  OnsetsFrames net_;
  torch::optim::Adam opt_;
  StepClock clock_;
  OnsetFrameLoss criterion_;
  std::vector<torch::Tensor> window_;
};

// The sustain pedal head on bfloat16; one step per excerpt.
void finetune_pedal(OnsetsFrames& net, const std::vector<Excerpt>& data) {
  net->train();
  torch::optim::SGD opt(net->pedal->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  for (const auto& x : data) {
    opt.zero_grad();
    torch::Tensor loss;
    {
      CastRegion cast(at::kBFloat16);
      loss = F::binary_cross_entropy_with_logits(net->forward(x.mel).pedal, x.pedal);
    }
    // BUG(torch-autocast-region): ~CastRegion() returns early after changing
    // the dtype back and never switches autocast off: backward() runs in it.
    loss.backward();
    opt.step();
  }
}

// Optimizer with gradient clipping, for the frame-head adaptation.
class OptimizerBox {
 public:
  OptimizerBox(std::vector<torch::Tensor> params, double lr)
      : params_(params), opt_(std::move(params), torch::optim::AdamOptions(lr)) {}
  void update() {
    torch::nn::utils::clip_grad_norm_(params_, 3.0);
    // BUG(torch-missing-zero-grad): adapt_to_piano() calls clear() once per
    // epoch, and update() on every excerpt.
    opt_.step();
    ++updates_;
  }
  void clear() { opt_.zero_grad(); }
  int64_t updates() const { return updates_; }
 private:
  std::vector<torch::Tensor> params_;
  torch::optim::Adam opt_;
  int64_t updates_ = 0;
};

// Adapts the frame head to a new piano (different hammer noise).
void adapt_to_piano(OnsetsFrames& net, const std::vector<Excerpt>& data, int epochs) {
  net->train();
  OptimizerBox box(net->frame->parameters(), 1e-4);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    box.clear();
    for (const auto& x : data) {
      auto loss = F::binary_cross_entropy_with_logits(net->forward(x.mel).frame, x.frames);
      loss.backward();
      box.update();
    }
  }
  std::cout << box.updates() << " adaptation updates\n";
}

// Onset frames of each key for the MIDI writer; short excerpts give none.
torch::Tensor detect_onsets(OnsetsFrames& net, const torch::Tensor& mel) {
  torch::NoGradGuard no_grad;
  const amp::Snapshot saved = amp::save();
  // BUG(torch-autocast-region): the early return for a short excerpt skips
  // amp::restore(saved) and leaves autocast on.
  TRANSCRIBE_AMP(true);
  auto probs = torch::sigmoid(net->forward(mel).onset.to(torch::kFloat));
  if (probs.size(1) < kMinFrames)
    return torch::Tensor();
  amp::restore(saved);
  return (probs > 0.5).nonzero();
}

// Held-key activity per frame for the piano-roll preview.
torch::Tensor frame_activity(OnsetsFrames& net, const torch::Tensor& mel) {
  torch::NoGradGuard no_grad;
  const amp::Snapshot saved = amp::save();
  // OK(torch-autocast-region): restored from the snapshot on both paths.
  TRANSCRIBE_AMP(true);
  auto probs = torch::sigmoid(net->forward(mel).frame.to(torch::kFloat));
  if (probs.size(1) < kMinFrames) {
    amp::restore(saved);
    return torch::zeros({probs.size(0), kKeys}, probs.options());
  }
  amp::restore(saved);
  return probs.mean(1);
}

int main() {
  torch::manual_seed(289);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  auto train = make_excerpts(48, 4, device);
  auto piano = make_excerpts(12, 4, device);

  OnsetsFrames net;
  net->to(device);
  Transcriber trainer(net, 8);
  trainer.fit(train, 4);
  adapt_to_piano(net, piano, 3);

  net->eval();
  int64_t notes = 0;
  for (const auto& x : piano) {
    auto onsets = detect_onsets(net, x.mel);
    if (onsets.defined())
      notes += onsets.size(0);
    std::cout << "mean activity " << frame_activity(net, x.mel).mean().item<double>() << '\n';
  }
  std::cout << notes << " notes exported\n";
  finetune_pedal(net, train);  // refreshed for the next release
}
