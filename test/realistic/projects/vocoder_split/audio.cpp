// Host buffers and signal helpers of the vocoder.
#include "vocoder.h"

#include <cmath>

MelBatcher::MelBatcher(int64_t batch, int64_t frames)
    : mels_(torch::empty({batch, kMels, frames}, torch::TensorOptions().pinned_memory(true))),
      audio_(torch::empty({batch, 1, frames * kHop})) {}

// Synthetic voiced speech: a harmonic stack at a random pitch, and a log-mel
// picture of it that is good enough to learn the inversion from.
void MelBatcher::refill(int64_t seed) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  const int64_t batch = audio_.size(0), samples = audio_.size(2);
  auto t = torch::arange(samples, torch::kFloat).div(kSampleRate);
  auto f0 = torch::rand({batch, 1}, gen) * 200 + 90;
  auto wave = torch::zeros({batch, samples});
  for (int64_t h = 1; h <= 4; ++h)
    wave += torch::sin(2 * M_PI * h * f0 * t) / static_cast<double>(h);
  audio_.copy_(0.25 * wave.unsqueeze(1));
  auto bins = torch::arange(kMels, torch::kFloat).view({1, kMels, 1});
  auto centre = (f0 / 8000.0 * kMels).unsqueeze(2);
  mels_.copy_(torch::log1p(torch::exp(-(bins - centre).pow(2) / 8.0)).expand(mels_.sizes()));
}

torch::Tensor reference_mels(int64_t frames) {
  auto bins = torch::arange(kMels, torch::kFloat).view({1, kMels, 1});
  return torch::log1p(torch::exp(-(bins - 12.0).pow(2) / 8.0)).expand({1, kMels, frames}).contiguous();
}

// Triangular filters from the rfft bins of kFrame to the kMels bands.
torch::Tensor mel_filterbank() {
  const int64_t bins = kFrame / 2 + 1;
  auto fb = torch::zeros({kMels, bins});
  auto acc = fb.accessor<float, 2>();
  for (int64_t m = 0; m < kMels; ++m) {
    const double centre = 1.0 + static_cast<double>(m) * (bins - 2) / kMels;
    for (int64_t b = 0; b < bins; ++b)
      acc[m][b] = static_cast<float>(std::max(0.0, 1.0 - std::abs(b - centre) / 2.0));
  }
  return fb;
}

static torch::Tensor magnitude(const torch::Tensor &wave, const torch::Tensor &window) {
  auto frames = wave.squeeze(1).unfold(1, kFrame, kHop);
  return torch::fft::rfft(frames * window).abs();
}

torch::Tensor spectral_l1(const torch::Tensor &fake, const torch::Tensor &real, const torch::Tensor &window) {
  return torch::nn::functional::l1_loss(magnitude(fake, window), magnitude(real, window));
}

// Starts the copy of a synthesized waveform to the host; the writer waits for
// it.
torch::Tensor download_async(const torch::Tensor &wave) {
  return wave.to(torch::kCPU, /*non_blocking=*/true);
}

torch::Tensor as_half(const torch::Tensor &wave) { return wave.to(torch::kHalf); }
