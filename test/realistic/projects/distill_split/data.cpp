// Batches for the distillation run: a fixed random projection of class
// centroids plus noise, made on the host as the real feature reader would,
// and a per-feature normaliser fitted on a few batches before training.
#include "distill.h"

#include <iostream>

namespace {

torch::Tensor centroids() {
  static torch::Tensor c = torch::randn({kClasses, kFeat}, torch::TensorOptions().dtype(torch::kFloat)) * 2.0;
  return c;
}

// A few features of the real data set are heavy-tailed; mimic that so that
// the normaliser has something to do.
torch::Tensor heavy_tail(int64_t n) {
  auto u = torch::rand({n, 4}).clamp_min(1e-4);
  return u.pow(-0.5) - 1.0;
}

}  // namespace

FeatureBatch synth_batch(int64_t n, uint64_t step) {
  auto labels = torch::randint(0, kClasses, {n}, torch::TensorOptions().dtype(torch::kLong));
  auto noise = torch::randn({n, kFeat});
  auto drift = 0.01 * static_cast<double>(step % 100);
  auto features = centroids().index_select(0, labels) + noise + drift;
  features.narrow(1, kFeat - 4, 4).add_(heavy_tail(n));
  return {features, labels};
}

void Normalizer::fit(int64_t batches, int64_t batch_size) {
  auto sum = torch::zeros({kFeat}, torch::kDouble);
  auto sq = torch::zeros({kFeat}, torch::kDouble);
  int64_t n = 0;
  for (int64_t b = 0; b < batches; ++b) {
    auto f = synth_batch(batch_size, static_cast<uint64_t>(b)).features.to(torch::kDouble);
    sum += f.sum(0);
    sq += f.pow(2).sum(0);
    n += batch_size;
  }
  mean_ = (sum / static_cast<double>(n)).to(torch::kFloat);
  auto var = (sq / static_cast<double>(n)).to(torch::kFloat) - mean_.pow(2);
  inv_std_ = var.clamp_min(1e-6).rsqrt();
  std::cout << "normaliser fitted on " << n << " rows\n";
}

torch::Tensor Normalizer::apply(const torch::Tensor &features) const {
  return (features - mean_) * inv_std_;
}

// Starts the copy and returns at once, so that the next batch can be built
// while the copy runs.
torch::Tensor upload(const torch::Tensor &host, torch::Device device) {
  return host.to(device, /*non_blocking=*/true);
}

double top1_agreement(const torch::Tensor &student_logits, const torch::Tensor &teacher_logits) {
  auto same = student_logits.argmax(1).eq(teacher_logits.argmax(1));
  // BUG(torch-host-sync-in-loop): run_distillation() (train.cpp) calls this
  // on every step with logits on the training device; item() waits for the
  // step to finish on the GPU.
  return same.to(torch::kFloat).mean().item<double>();
}
