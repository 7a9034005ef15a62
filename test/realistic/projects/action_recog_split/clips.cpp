// Synthetic clips: each action is a bright blob drifting in a direction of
// its own, over sensor noise. Also the decoder-side resampling.
#include "action.h"

#include <cmath>

namespace F = torch::nn::functional;

namespace {

constexpr double kPi = 3.14159265358979323846;

ClipBatch synth_clips(int64_t batch, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto labels = torch::randint(0, kClasses, {batch}, gen, torch::kLong);
  auto angle = labels.to(torch::kFloat).mul(2.0 * kPi / kClasses).view({batch, 1, 1, 1});
  auto t = torch::arange(kFrames, torch::kFloat).view({1, kFrames, 1, 1});
  auto start = torch::rand({batch, 2}, gen) * 0.6 - 0.3;
  auto cx = start.select(1, 0).view({batch, 1, 1, 1}) + angle.cos() * 0.08 * t;
  auto cy = start.select(1, 1).view({batch, 1, 1, 1}) + angle.sin() * 0.08 * t;
  auto lin = torch::linspace(-1, 1, kSide);
  auto xs = lin.view({1, 1, 1, kSide});
  auto ys = lin.view({1, 1, kSide, 1});
  auto blob = torch::exp(-((xs - cx).pow(2) + (ys - cy).pow(2)) / 0.02);  // [B, T, S, S]
  auto frames = blob.unsqueeze(1).repeat({1, 3, 1, 1, 1});
  frames += 0.1 * torch::randn({batch, 3, kFrames, kSide, kSide}, gen);
  return {frames, labels};
}

}  // namespace

ClipSource::ClipSource(int64_t batch, uint64_t seed) : batch_(batch), seed_(seed) {}

ClipBatch ClipSource::next() { return synth_clips(batch_, seed_ + drawn_++); }

ClipBatch ClipSource::next_pinned() {
  ClipBatch host = next();
  return {host.frames.pin_memory(), host.labels.pin_memory()};
}

torch::Tensor synth_stream(int64_t clips, uint64_t seed) {
  auto frames = synth_clips(clips, seed).frames;  // [N, 3, T, S, S]
  // Twice the frame rate: every frame is shown twice.
  frames = frames.repeat_interleave(2, 2);
  return frames.permute({1, 0, 2, 3, 4}).reshape({3, clips * 2 * kFrames, kSide, kSide});
}

torch::Tensor resample_clip(const torch::Tensor &raw) {
  auto x = raw.to(decode_device()).unsqueeze(0);
  x = F::interpolate(x, F::InterpolateFuncOptions()
                            .size(std::vector<int64_t>{kFrames, kSide, kSide})
                            .mode(torch::kTrilinear)
                            .align_corners(false));
  return x.squeeze(0).to(torch::kCPU);
}
