#include "data.h"

Batch make_batch(int64_t n) {
  Batch b;
  b.x = torch::randn({n, 4});
  b.y = torch::randn({n, 2});
  return b;
}

void fill_batch(Batch &out, int64_t n, torch::Device device) {
  out.x = torch::randn({n, 4}).to(device);
  out.y = torch::randn({n, 2});
}
