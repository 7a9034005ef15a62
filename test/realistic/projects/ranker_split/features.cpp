#include "ranker.h"

#include <iostream>

torch::Tensor host_features(int64_t n) { return torch::randn({n, kFeat}); }

torch::Tensor pinned_features(int64_t n) {
  return torch::randn({n, kFeat}, torch::TensorOptions().pinned_memory(true));
}

torch::Tensor relevance_labels(int64_t n) { return torch::randint(0, 2, {n}, torch::kFloat); }

// Asynchronous upload; only overlaps when the caller hands in pinned memory.
torch::Tensor upload(const torch::Tensor &host, torch::Device device) {
  return host.to(device, /*non_blocking=*/true);
}

torch::Tensor to_host_async(const torch::Tensor &t) { return t.to(torch::kCPU, /*non_blocking=*/true); }

// RankNet loss over all pairs of one list.
torch::Tensor pairwise_loss(const torch::Tensor &scores, const torch::Tensor &labels) {
  auto diff = scores.unsqueeze(1) - scores.unsqueeze(0);
  auto target = (labels.unsqueeze(1) > labels.unsqueeze(0)).to(scores.scalar_type());
  return torch::binary_cross_entropy_with_logits(diff, target);
}

void accumulate(RunStats &stats, const torch::Tensor &loss) {
  // OK(torch-loss-accumulation-graph): detached before it is summed.
  stats.loss_sum += loss.detach();
  ++stats.steps;
}

void log_every(int64_t step, int64_t every, const torch::Tensor &loss) {
  if (step % every == 0) {
    // OK(torch-host-sync-in-loop): only every 'every' steps.
    std::cout << "step " << step << " loss " << loss.item<double>() << '\n';
  }
}

// Score histogram computed on the GPU; main() calls it only when CUDA is there.
torch::Tensor gpu_score_histogram(const torch::Tensor &scores) {
  // OK(torch-cuda-unguarded): every caller checks torch::cuda::is_available().
  return torch::histc(scores.to(torch::kCUDA), 20, -5.0, 5.0).cpu();
}
