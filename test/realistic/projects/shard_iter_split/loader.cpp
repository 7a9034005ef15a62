// Shard reading. The real loader decodes a columnar file per shard; here a
// shard is generated from its index so that runs are reproducible.
#include "shards.h"

Batch ShardLoader::iterator::operator*() const {
  torch::manual_seed(static_cast<uint64_t>(owner_->seed() * 1000003u + static_cast<uint64_t>(index_)));
  const int64_t n = owner_->batch_size();
  auto labels = torch::randint(0, kClasses, {n}, torch::TensorOptions().dtype(torch::kLong));
  auto centers = torch::linspace(-2.0, 2.0, kClasses).unsqueeze(1).expand({kClasses, kFeatures});
  auto features = centers.index_select(0, labels) + torch::randn({n, kFeatures});
  return {features, labels};
}

// Inverse class frequencies of the training set, normalised to mean 1.
torch::Tensor class_weights() {
  auto freq = torch::tensor({0.35, 0.25, 0.2, 0.15, 0.05}, torch::TensorOptions().dtype(torch::kFloat));
  auto w = 1.0 / freq;
  return w / w.mean();
}
