// Synthetic scanned pages: a few rectangular regions of each kind drawn on a
// blank page, each with its own ink density, plus scanner noise.
#include "layout.h"

#include <fstream>
#include <random>

torch::Tensor page_buffer(int64_t batch) { return torch::empty({batch, 1, kPageH, kPageW}); }

torch::Tensor pinned_page_buffer(int64_t batch) {
  return torch::empty({batch, 1, kPageH, kPageW}, torch::TensorOptions().pinned_memory(true));
}

torch::Tensor render_pages(torch::Tensor &pixels, uint64_t seed) {
  const int64_t batch = pixels.size(0);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> top(0, kPageH - 32), left(0, kPageW - 32), extent(8, 32),
      kind(1, kRegions - 1), count(3, 8);
  auto labels = torch::zeros({batch, kPageH, kPageW}, torch::kLong);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t regions = count(rng);
    for (int64_t r = 0; r < regions; ++r) {
      const int64_t y = top(rng), x = left(rng);
      labels[b].slice(0, y, y + extent(rng)).slice(1, x, x + extent(rng)).fill_(kind(rng));
    }
  }
  // Mean ink per region kind: blank, text, table rules, figure, margin note.
  const auto ink = torch::tensor(std::vector<float>{0.02f, 0.55f, 0.35f, 0.8f, 0.25f});
  auto clean = ink.index_select(0, labels.flatten()).view({batch, 1, kPageH, kPageW});
  pixels.copy_((clean + 0.05 * torch::randn({batch, 1, kPageH, kPageW})).clamp(0.0, 1.0));
  return labels;
}

void save_mask_pgms(const torch::Tensor &masks, const std::string &prefix) {
  auto m = masks.accessor<uint8_t, 3>();
  for (int64_t b = 0; b < m.size(0); ++b) {
    std::ofstream out(prefix + "_" + std::to_string(b) + ".pgm", std::ios::binary);
    out << "P5\n" << kPageW << ' ' << kPageH << "\n255\n";
    for (int64_t y = 0; y < m.size(1); ++y)
      for (int64_t x = 0; x < m.size(2); ++x)
        out.put(static_cast<char>(m[b][y][x] * (255 / (kRegions - 1))));
  }
}
