// Historian windows. The real deployment reads them from the SCADA
// historian's REST API; here a diurnal demand curve drives every channel.
#include "scada.h"

#include <cmath>

namespace {

// Standardised response of channel c to the station's load at minute t.
float channel_response(int64_t c, float load, int64_t t) {
  const float phase = 0.1f * static_cast<float>(t) + 0.7f * static_cast<float>(c);
  return (0.3f + 0.1f * static_cast<float>(c % 3)) * load + 0.05f * std::sin(phase);
}

}  // namespace

HistorianFeed::HistorianFeed(int64_t stations, int64_t batch, uint64_t seed)
    : raw_(static_cast<size_t>(batch * kChannels * kWindow)),
      flags_(static_cast<size_t>(batch)),
      stations_(stations),
      batch_(batch),
      rng_(static_cast<std::mt19937::result_type>(seed)) {}

WindowBatch HistorianFeed::next() {
  std::normal_distribution<float> noise(0.f, 0.05f);
  std::uniform_real_distribution<float> demand(0.2f, 1.0f);
  for (int64_t b = 0; b < batch_; ++b) {
    const int64_t station = (cursor_ + b) % stations_;
    const float load = demand(rng_);
    // Station 7 has a drive-end bearing that heats up under load.
    const bool fault = station == 7 && load > 0.6f;
    flags_[static_cast<size_t>(b)] = fault ? 0 : 1;
    for (int64_t c = 0; c < kChannels; ++c) {
      for (int64_t t = 0; t < kWindow; ++t) {
        float v = channel_response(c, load, t) + noise(rng_);
        if (fault && c == kBearingTemp)
          v += 0.015f * static_cast<float>(t);
        raw_[static_cast<size_t>((b * kChannels + c) * kWindow + t)] = v;
      }
    }
  }
  cursor_ += batch_;

  auto values = torch::from_blob(raw_.data(), {batch_, kChannels, kWindow}, torch::kFloat);
  WindowBatch out;
  // raw_ is overwritten by the next call, so both columns are copied out;
  // the values go to page-locked memory when there is a GPU to feed.
  out.values = Env::has_cuda() ? values.pin_memory() : values.clone();
  out.healthy = torch::from_blob(flags_.data(), {batch_}, torch::kUInt8).clone();
  return out;
}

// Windows of known-good operation (commissioning data) for the threshold.
torch::Tensor healthy_reference(int64_t n, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto load = torch::rand({n, 1, 1}, gen) * 0.8 + 0.2;
  auto t = torch::arange(kWindow, torch::kFloat).view({1, 1, kWindow});
  auto c = torch::arange(kChannels, torch::kFloat).view({1, kChannels, 1});
  auto gain = 0.3 + 0.1 * torch::fmod(c, 3.0);
  auto windows = gain * load + 0.05 * torch::sin(0.1 * t + 0.7 * c) + 0.05 * torch::randn({n, kChannels, kWindow}, gen);
  return windows.view({n, kChannels, kWindow});
}
