// A host-side data pipeline with a prefetch queue feeding a regression model:
// shards are decoded on the host, queued, and uploaded one batch at a time.
#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <iostream>
#include <vector>

struct PipelineConfig {
  int64_t batch = 128;
  int64_t features = 64;
  int64_t depth = 4;     // batches kept ready
  int64_t steps = 300;
  float max_norm = 1e4f;
};

// Decodes one shard of records into host tensors.
std::vector<torch::Tensor> decode_shard(const PipelineConfig &cfg, int64_t records) {
  std::vector<torch::Tensor> shard;
  for (int64_t i = 0; i < records; i += cfg.batch)
    shard.push_back(torch::randn({cfg.batch, cfg.features + 1}));
  return shard;
}

class Prefetcher {
 public:
  Prefetcher(const PipelineConfig &cfg, torch::Device device) : cfg_(cfg), device_(device) {}

  void fill() {
    while (static_cast<int64_t>(ready_.size()) < cfg_.depth)
      ready_.push_back(torch::randn({cfg_.batch, cfg_.features + 1}));
  }

  // Uploads the oldest ready batch.
  torch::Tensor next() {
    fill();
    // BUG(torch-non-blocking-pageable): the queued batches come from
    // torch::randn and were never pinned; the copy is synchronous.
    auto batch = ready_.front().to(device_, /*non_blocking=*/true);
    ready_.pop_front();
    return batch;
  }

 private:
  PipelineConfig cfg_;
  torch::Device device_;
  std::deque<torch::Tensor> ready_;
};

class PinnedPrefetcher {
 public:
  PinnedPrefetcher(const PipelineConfig &cfg, torch::Device device) : cfg_(cfg), device_(device) {}

  void load(const std::vector<torch::Tensor> &shard) {
    for (const auto &t : shard)
      pinned_.push_back(t.pin_memory());
  }

  torch::Tensor next() {
    // OK(torch-non-blocking-pageable): every queued batch was pinned in load().
    auto batch = pinned_.front().to(device_, /*non_blocking=*/true);
    pinned_.pop_front();
    return batch;
  }
  bool empty() const { return pinned_.empty(); }

 private:
  PipelineConfig cfg_;
  torch::Device device_;
  std::deque<torch::Tensor> pinned_;
};

void pin_shard(std::vector<torch::Tensor> &shard) {
  for (auto &t : shard)
    // BUG(torch-tensor-to-discarded): pin_memory() returns a pinned copy;
    // the shard's tensors stay pageable.
    t.pin_memory();
}

// Sanity check of an uploaded batch, once per shard.
bool batch_is_sane(const torch::Tensor &gpu_batch, float max_norm) {
  auto norm = gpu_batch.norm().to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): the norm is read before the
  // device-to-host copy is known to be complete.
  return norm.item<float>() < max_norm;
}

bool batch_is_sane_synced(const torch::Tensor &gpu_batch, float max_norm) {
  auto norm = gpu_batch.norm().to(torch::kCPU, /*non_blocking=*/true);
  torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): synchronised before the read.
  return norm.item<float>() < max_norm;
}

int main() {
  PipelineConfig cfg;
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  torch::nn::Linear model(cfg.features, 1);
  model->to(device);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));

  Prefetcher prefetcher(cfg, device);
  auto first = prefetcher.next();
  if (!batch_is_sane(first, cfg.max_norm))
    return 1;

  auto running = torch::zeros({}, device);
  for (int64_t step = 0; step < cfg.steps; ++step) {
    auto batch = prefetcher.next();
    auto x = batch.narrow(1, 0, cfg.features);
    auto y = batch.narrow(1, cfg.features, 1);
    auto loss = torch::mse_loss(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    running += loss.detach();
  }
  std::cout << "mean loss " << (running / cfg.steps).item<double>() << '\n';

  auto shard = decode_shard(cfg, 4096);
  pin_shard(shard);
  PinnedPrefetcher pinned(cfg, device);
  pinned.load(shard);
  int64_t fine_tune_steps = 0;
  while (!pinned.empty()) {
    auto batch = pinned.next();
    if (fine_tune_steps == 0 && !batch_is_sane_synced(batch, cfg.max_norm))
      break;
    auto loss = torch::mse_loss(model->forward(batch.narrow(1, 0, cfg.features)),
                                batch.narrow(1, cfg.features, 1));
    opt.zero_grad();
    loss.backward();
    opt.step();
    ++fine_tune_steps;
  }
  std::cout << fine_tune_steps << " fine-tuning steps\n";
  return 0;
}
