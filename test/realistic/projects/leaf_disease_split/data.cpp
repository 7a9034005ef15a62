// Synthetic leaf crops: a green ellipse on soil, and per disease its own
// lesions (rust pustules, dark blight rings, white mildew, yellow mosaic,
// grey scab). Also the holdout and field sets, the class weights and the
// device upload.
#include "leaf.h"

#include <algorithm>

namespace {

// Lesion colour and lesion density of each class; healthy leaves have none.
torch::Tensor lesion_colours() {
  return torch::tensor({0.0f, 0.0f, 0.0f, 0.72f, 0.36f, 0.10f, 0.22f, 0.14f, 0.05f,
                        0.92f, 0.92f, 0.88f, 0.80f, 0.78f, 0.30f, 0.35f, 0.33f, 0.30f})
      .view({kClasses, 3});
}

torch::Tensor lesion_density() { return torch::tensor({0.0f, 0.08f, 0.14f, 0.25f, 0.20f, 0.05f}); }

// Draws the leaves of the given labels into images ([B, 3, S, S], host).
void render_into(torch::Tensor &images, const torch::Tensor &labels, at::Generator &gen) {
  const int64_t b = labels.size(0);
  auto lin = torch::linspace(-1, 1, kSide);
  auto ys = lin.view({1, kSide, 1});
  auto xs = lin.view({1, 1, kSide});
  auto shape = torch::rand({b, 3}, gen);
  auto ax = (0.55 + 0.35 * shape.select(1, 0)).view({b, 1, 1});
  auto ay = (0.30 + 0.25 * shape.select(1, 1)).view({b, 1, 1});
  auto tilt = (shape.select(1, 2) - 0.5).view({b, 1, 1});
  auto u = xs + tilt * ys;
  auto leaf = ((u / ax).pow(2) + (ys / ay).pow(2) <= 1.0).to(torch::kFloat).unsqueeze(1);
  auto density = lesion_density().index_select(0, labels).view({b, 1, 1, 1});
  auto lesion = (torch::rand({b, 1, kSide, kSide}, gen) < density).to(torch::kFloat) * leaf;
  auto soil = torch::tensor({0.42f, 0.33f, 0.22f}).view({1, 3, 1, 1});
  auto green = torch::tensor({0.18f, 0.55f, 0.20f}).view({1, 3, 1, 1});
  auto img = soil * (1 - leaf) + green * leaf;
  img = img * (1 - lesion) + lesion_colours().index_select(0, labels).view({b, 3, 1, 1}) * lesion;
  images.copy_(img + 0.03 * torch::randn({b, 3, kSide, kSide}, gen));
}

}  // namespace

LeafSource::LeafSource(uint64_t seed, int64_t batch, bool pin)
    : gen_(at::detail::createCPUGenerator(seed)), batch_(batch), pin_(pin) {}

LeafBatch LeafSource::next() {
  LeafBatch b;
  b.labels = torch::randint(0, kClasses, {batch_}, gen_, torch::TensorOptions().dtype(torch::kLong));
  b.images = torch::empty({batch_, 3, kSide, kSide}, torch::TensorOptions().pinned_memory(pin_));
  render_into(b.images, b.labels, gen_);
  return b;
}

// A fixed holdout: the same crops at every validation.
std::vector<LeafBatch> holdout_chunks(int64_t chunks, uint64_t seed) {
  LeafSource src(seed, 128, /*pin=*/false);
  std::vector<LeafBatch> out;
  out.reserve(static_cast<size_t>(chunks));
  for (int64_t i = 0; i < chunks; ++i)
    out.push_back(src.next());
  return out;
}

// Growers' photos: darker, noisier, and off-centre.
LeafBatch field_photos(uint64_t seed) {
  LeafSource src(seed, 96, /*pin=*/false);
  LeafBatch b = src.next();
  b.images = (0.8 * b.images + 0.05 * torch::randn_like(b.images)).roll({5, -3}, {2, 3});
  return b;
}

// Miss costs normalised to mean 1.
torch::Tensor class_weights() {
  auto w = torch::empty({kClasses});
  auto acc = w.accessor<float, 1>();
  double total = 0.0;
  for (double c : kMissCost)
    total += c;
  for (int64_t c = 0; c < kClasses; ++c)
    acc[c] = static_cast<float>(kMissCost[static_cast<size_t>(c)] * kClasses / total);
  return w;
}

torch::Tensor upload(const torch::Tensor &host, torch::Device device) {
  return host.to(device, /*non_blocking=*/true);
}
