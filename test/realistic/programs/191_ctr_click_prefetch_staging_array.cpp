// Click-through-rate model for display ads: 13 dense counters (log-scaled) and
// 26 hashed categorical fields, a DLRM-style model with one shared embedding
// table and a dot-product interaction. A Prefetcher keeps two host staging
// slots per feature kind in std::arrays built by its constructor: prefetch()
// fills the slot of the next step and starts its upload, next() hands the
// uploaded tensors to the trainer one step later. Daily log-loss on the
// held-out days runs under one InferenceMode guard in main().
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <array>
#include <cstdint>
#include <iostream>
#include <tuple>
#include <utility>
#include <vector>

constexpr int64_t kDense = 13, kFields = 26, kBuckets = 1 << 17, kDim = 16, kBatch = 2048;

struct CtrNetImpl : torch::nn::Module {
  CtrNetImpl()
      : table(register_module("table", torch::nn::Embedding(kBuckets, kDim))),
        bottom(register_module("bottom", torch::nn::Sequential(torch::nn::Linear(kDense, 64), torch::nn::ReLU(),
                                                               torch::nn::Linear(64, kDim), torch::nn::ReLU()))),
        top(register_module("top", torch::nn::Sequential(torch::nn::Linear(kDim + (kFields + 1) * kFields / 2, 128),
                                                         torch::nn::ReLU(), torch::nn::Linear(128, 1)))) {}

  torch::Tensor forward(const torch::Tensor &dense, const torch::Tensor &ids) {
    auto d = bottom->forward(dense);                                 // [B, kDim]
    auto feats = torch::cat({d.unsqueeze(1), table(ids)}, 1);        // [B, kFields + 1, kDim]
    auto inter = torch::bmm(feats, feats.transpose(1, 2));           // [B, F + 1, F + 1]
    auto iu = torch::triu_indices(kFields + 1, kFields + 1, 1, ids.options());
    auto pairs = inter.index({torch::indexing::Slice(), iu[0], iu[1]});
    return top->forward(torch::cat({d, pairs}, 1)).squeeze(1);
  }

  torch::nn::Embedding table;
  torch::nn::Sequential bottom, top;
};
TORCH_MODULE(CtrNet);

struct RawBatch {
  torch::Tensor dense, ids, clicks;
};

RawBatch read_log_shard(int64_t n) {
  RawBatch b;
  b.dense = torch::log1p(torch::randint(0, 1000, {n, kDense}).to(torch::kFloat));
  b.ids = torch::randint(0, kBuckets, {n, kFields}, torch::kLong);
  b.clicks = (torch::rand({n}) < 0.03).to(torch::kFloat);
  return b;
}

class Prefetcher {
 public:
  explicit Prefetcher(torch::Device device)
      : device_(device),
        dense_staging_{torch::empty({kBatch, kDense}), torch::empty({kBatch, kDense})},
        ids_staging_{torch::empty({kBatch, kFields}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(true)),
                     torch::empty({kBatch, kFields}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(true))} {}

  void prefetch(int64_t step) {
    const size_t slot = static_cast<size_t>(step % 2);
    RawBatch raw = read_log_shard(kBatch);
    dense_staging_[slot].copy_(raw.dense);
    ids_staging_[slot].copy_(raw.ids);
    // BUG(torch-non-blocking-pageable): the dense slots were allocated
    // without pinned_memory(true), so this upload blocks the host anyway.
    next_dense_ = dense_staging_[slot].to(device_, /*non_blocking=*/true);
    // OK(torch-non-blocking-pageable): the id slots are pinned.
    next_ids_ = ids_staging_[slot].to(device_, /*non_blocking=*/true);
    next_clicks_ = raw.clicks.to(device_);
  }

  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> next() const { return {next_dense_, next_ids_, next_clicks_}; }

 private:
  torch::Device device_;
  std::array<torch::Tensor, 2> dense_staging_;
  std::array<torch::Tensor, 2> ids_staging_;
  torch::Tensor next_dense_, next_ids_, next_clicks_;
};

// (clicks predicted above 0.5 that were clicks, rows)
std::pair<int64_t, int64_t> batch_hits(const torch::Tensor &logits, const torch::Tensor &clicks) {
  auto hit = (logits > 0).logical_and(clicks > 0.5);
  // BUG(torch-host-sync-in-loop): train() calls this on every step; the
  // count is read back to the host each time.
  const int64_t hits = hit.sum().item<int64_t>();
  return {hits, clicks.size(0)};
}

void train(CtrNet &net, int64_t steps, torch::Device device) {
  net->train();
  torch::optim::Adagrad opt(net->parameters(), torch::optim::AdagradOptions(0.01));
  Prefetcher prefetcher(device);
  std::vector<torch::Tensor> step_losses;
  int64_t hits = 0, rows = 0;
  prefetcher.prefetch(0);
  for (int64_t step = 0; step < steps; ++step) {
    auto [dense, ids, clicks] = prefetcher.next();
    prefetcher.prefetch(step + 1);
    auto logits = net->forward(dense, ids);
    auto loss = torch::binary_cross_entropy_with_logits(logits, clicks);
    opt.zero_grad();
    loss.backward();
    opt.step();

    // BUG(torch-loss-accumulation-graph): the vector keeps every step's loss
    // together with its graph until the end of training.
    step_losses.push_back(loss);
    int64_t h = 0, n = 0;
    std::tie(h, n) = batch_hits(logits.detach(), clicks);
    hits += h;
    rows += n;
    if ((step + 1) % 500 == 0) {
      // OK(torch-host-sync-in-loop): every 500 steps.
      std::cout << "step " << step + 1 << " loss " << loss.item<double>() << " hits/row "
                << static_cast<double>(hits) / rows << "\n";
    }
  }
  std::cout << "mean training loss " << torch::stack(step_losses).mean().item<double>() << "\n";
}

double day_logloss(CtrNet &net, const RawBatch &day, torch::Device device) {
  // OK(torch-inference-without-no-grad): main() holds an InferenceMode guard
  // around the loop that calls this for every held-out day.
  auto logits = net->forward(day.dense.to(device), day.ids.to(device));
  return torch::binary_cross_entropy_with_logits(logits, day.clicks.to(device)).item<double>();
}

int main() {
  torch::manual_seed(21);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  CtrNet net;
  net->to(device);
  train(net, 20000, device);

  if (device.is_cuda()) {
    // OK(torch-empty-cache-in-loop): once, between training and evaluation.
    c10::cuda::CUDACachingAllocator::emptyCache();
  }

  net->eval();
  c10::InferenceMode guard;
  double total = 0.0;
  const int days = 7;
  for (int d = 0; d < days; ++d)
    total += day_logloss(net, read_log_shard(50000), device);
  std::cout << "held-out log-loss " << total / days << "\n";
  return 0;
}
