#include "pipeline.h"

Loader::Loader(int64_t batches, int64_t batch, int64_t features)
    : batches_(batches), batch_(batch), features_(features) {}

HostBatch Loader::next() {
  ++served_;
  auto x = torch::randn({batch_, features_});
  auto y = x.pow(2).sum(1, /*keepdim=*/true);
  return {x, y};
}
