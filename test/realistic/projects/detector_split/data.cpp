// Staging buffers, synthetic crops and anchors of the detector.
#include "detector.h"

StagingArea make_staging(int64_t batch) {
  StagingArea area;
  area.images = torch::empty({batch, 3, kImage, kImage});
  area.boxes = torch::empty({batch, 4});
  area.labels = torch::empty({batch}, torch::kLong);
  return area;
}

// Page-locked variant for the evaluation feed, which overlaps the copy with
// the previous batch's forward.
StagingArea make_pinned_staging(int64_t batch) {
  auto pinned = torch::TensorOptions().pinned_memory(true);
  StagingArea area;
  area.images = torch::empty({batch, 3, kImage, kImage}, pinned);
  area.boxes = torch::empty({batch, 4}, pinned);
  area.labels = torch::empty({batch}, pinned.dtype(torch::kLong));
  return area;
}

// Draws a bright square on noise; the label is the square's size bucket.
void fill_synthetic(StagingArea &area, int64_t seed) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  const int64_t n = area.images.size(0);
  area.images.copy_(0.1 * torch::randn(area.images.sizes(), gen));
  auto centre = torch::rand({n, 2}, gen) * 0.5 + 0.25;
  auto size = torch::rand({n, 2}, gen) * 0.2 + 0.05;
  area.boxes.copy_(torch::cat({centre, size}, 1));
  area.labels.copy_((size.select(1, 0) * kClasses / 0.25).to(torch::kLong).clamp(0, kClasses - 1));
  auto acc = area.boxes.accessor<float, 2>();
  for (int64_t i = 0; i < n; ++i) {
    const auto x0 = static_cast<int64_t>((acc[i][0] - acc[i][2] / 2) * kImage);
    const auto y0 = static_cast<int64_t>((acc[i][1] - acc[i][3] / 2) * kImage);
    const auto w = std::max<int64_t>(1, static_cast<int64_t>(acc[i][2] * kImage));
    const auto h = std::max<int64_t>(1, static_cast<int64_t>(acc[i][3] * kImage));
    area.images[i].narrow(1, y0, h).narrow(2, x0, w).add_(1.0);
  }
}

// One anchor per crop, centred, a quarter of the crop wide.
torch::Tensor make_anchors(int64_t batch) {
  auto anchors = torch::empty({batch, 4});
  anchors.narrow(1, 0, 2).fill_(0.5);
  anchors.narrow(1, 2, 2).fill_(0.25);
  return anchors;
}

// Starts the copy to the device and returns at once; the caller decides the
// memory it hands over.
torch::Tensor upload(const torch::Tensor &host, torch::Device device) {
  return host.to(device, /*non_blocking=*/true);
}
