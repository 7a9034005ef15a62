// Phantoms, sampling masks and k-space simulation, and the staging ring.
#include "recon.h"

// Ellipse phantoms: five random ellipses of random intensity per image.
torch::Tensor phantom_batch(int64_t batch, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto lin = torch::linspace(-1, 1, kSide);
  auto ys = lin.view({1, kSide, 1});
  auto xs = lin.view({1, 1, kSide});
  auto img = torch::zeros({batch, kSide, kSide});
  for (int e = 0; e < 5; ++e) {
    auto p = torch::rand({batch, 5, 1, 1}, gen);
    auto cx = p.select(1, 0).view({batch, 1, 1}) - 0.5;
    auto cy = p.select(1, 1).view({batch, 1, 1}) - 0.5;
    auto a = 0.1 + 0.4 * p.select(1, 2).view({batch, 1, 1});
    auto b = 0.1 + 0.4 * p.select(1, 3).view({batch, 1, 1});
    auto inside = ((xs - cx) / a).pow(2) + ((ys - cy) / b).pow(2) <= 1.0;
    img += inside.to(torch::kFloat) * p.select(1, 4).view({batch, 1, 1});
  }
  return img.view({batch, 1, kSide, kSide});
}

// Random phase-encoding lines at 1/kAccel density, plus the low frequencies
// (which sit at both ends of an unshifted FFT).
torch::Tensor undersample_mask(uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto cols = (torch::rand({kSide}, gen) < 1.0 / kAccel).to(torch::kFloat);
  cols.narrow(0, 0, kAcs / 2).fill_(1.0);
  cols.narrow(0, kSide - kAcs / 2, kAcs / 2).fill_(1.0);
  return cols.view({1, 1, 1, kSide});
}

torch::Tensor zero_filled(const torch::Tensor &images, const torch::Tensor &mask) {
  auto kspace = torch::fft::fft2(images.to(torch::kComplexFloat));
  return torch::fft::ifft2(kspace * mask).abs();
}

// A fully sampled multi-coil scan of one phantom: each coil sees the image
// through a smooth sensitivity centred on its corner.
torch::Tensor calibration_scan(uint64_t seed) {
  auto img = phantom_batch(1, seed);
  auto lin = torch::linspace(-1, 1, kSide);
  std::vector<torch::Tensor> coils;
  for (int64_t c = 0; c < kCoils; ++c) {
    const double cy = c < 2 ? -1.0 : 1.0, cx = c % 2 == 0 ? -1.0 : 1.0;
    auto dist = (lin.view({kSide, 1}) - cy).pow(2) + (lin.view({1, kSide}) - cx).pow(2);
    coils.push_back(torch::exp(-dist / 2.0));
  }
  auto sens = torch::stack(coils).unsqueeze(0);  // [1, kCoils, S, S]
  return torch::fft::fft2((img * sens).to(torch::kComplexFloat));
}

DeviceRing::DeviceRing(int64_t slots, int64_t batch, torch::Device device) {
  for (int64_t i = 0; i < slots; ++i)
    slots_.push_back(torch::empty({batch, 1, kSide, kSide}, torch::TensorOptions().device(device)));
}

torch::Tensor DeviceRing::stage(const torch::Tensor &host) {
  auto &slot = slots_[next_];
  next_ = (next_ + 1) % slots_.size();
  slot.copy_(host, /*non_blocking=*/true);
  return slot;
}
