// Click-through-rate prediction for a news feed: 13 dense features and 8
// hashed categorical fields (an embedding table per field) feed a small
// cross network. The daily retrain runs in float16 with a static loss scale
// and gradient accumulation; each epoch ends with temperature calibration on
// held-out impressions; the intraday update fine-tunes on the morning's
// shards in bfloat16. The trainer owns an AmpContext that begin_step() and
// end_step() enter and exit. LibTorch 1.13/2.x.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <iostream>
#include <vector>

namespace nn = torch::nn;

namespace ctr {

constexpr int64_t kDense = 13, kFields = 8, kHash = 4096, kEmb = 16;
constexpr double kLossScale = 512.0;

// CUDA autocast, one spelling for LibTorch 1.13 and 2.x.
struct AmpContext {
  at::ScalarType dtype = at::kHalf;
  bool active = false;
  void enter() {
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(true);
#endif
    active = true;
  }
  void exit() {
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_enabled(at::kCUDA, false);
#else
    at::autocast::set_enabled(false);
#endif
    active = false;
  }
};

struct CrossNetImpl : nn::Module {
  CrossNetImpl()
      : emb(register_module("emb", nn::Embedding(kFields * kHash, kEmb))),
        cross(register_module("cross", nn::Linear(kDense + kFields * kEmb, kDense + kFields * kEmb))),
        deep(register_module("deep", nn::Sequential(nn::Linear(kDense + kFields * kEmb, 128), nn::BatchNorm1d(128), nn::ReLU(),
                                                    nn::Dropout(0.2), nn::Linear(128, 64), nn::ReLU()))),
        out(register_module("out", nn::Linear(64 + kDense + kFields * kEmb, 1))) {}
  // dense: B x 13 float; ids: B x 8 long, already offset per field
  torch::Tensor forward(const torch::Tensor& dense, const torch::Tensor& ids) {
    auto x0 = torch::cat({dense, emb->forward(ids).flatten(1)}, 1);
    auto x1 = x0 * cross->forward(x0) + x0;
    return out->forward(torch::cat({deep->forward(x0), x1}, 1)).squeeze(1);
  }
  nn::Embedding emb;
  nn::Linear cross;
  nn::Sequential deep;
  nn::Linear out;
};
TORCH_MODULE(CrossNet);

struct CtrBatch {
  torch::Tensor dense, ids, clicks;
  int64_t positives = 0;  // counted by the log reader
};

std::vector<CtrBatch> read_shards(int64_t n, int64_t b, double ctr) {
  std::vector<CtrBatch> out;
  const auto offsets = torch::arange(kFields, torch::kLong) * kHash;
  for (int64_t i = 0; i < n; ++i) {
    auto clicks = (torch::rand({b}) < ctr).to(torch::kFloat);
    out.push_back({torch::randn({b, kDense}), torch::randint(kHash, {b, kFields}, torch::kLong) + offsets, clicks,
                   static_cast<int64_t>(i % 7 == 6 ? 0 : b / 10)});
  }
  return out;
}

// The loss of one micro-batch, divided for accumulation.
torch::Tensor scale_for_accumulation(const torch::Tensor& loss, int64_t k) { return loss / static_cast<double>(k); }

// Log-loss with label smoothing for the intraday update.
torch::Tensor smoothed_logloss(const torch::Tensor& logits, const torch::Tensor& clicks, double eps) {
  return torch::binary_cross_entropy_with_logits(logits, clicks * (1.0 - eps) + 0.5 * eps);
}

struct EpochStats {
  torch::Tensor logloss;
  int64_t batches = 0, skipped = 0;
};

class CtrTrainer {
 public:
  CtrTrainer(CrossNet net, torch::Device device, int64_t accum)
      : net_(std::move(net)), device_(device), accum_(accum), opt_(net_->parameters(), torch::optim::AdamOptions(1e-3)) {
    net_->to(device_);
  }

  void fit(const std::vector<CtrBatch>& train, const std::vector<CtrBatch>& holdout, int epochs) {
    for (int e = 0; e < epochs; ++e) {
      net_->train();
      stats_ = {torch::zeros({}, torch::TensorOptions().device(device_)), 0, 0};
      int64_t micro = 0;
      for (const auto& b : train) {
        if (!train_step(b)) continue;
        if (++micro % accum_ == 0) apply_step();
      }
      const double t = calibrate_temperature(holdout);
      std::cout << "epoch " << e << " logloss " << stats_.logloss.item<double>() / static_cast<double>(stats_.batches) << " skipped "
                << stats_.skipped << " T " << t << '\n';
    }
  }

  // Intraday: the morning's shards, bfloat16, steps every accum_ shards.
  void update_intraday(std::vector<CtrBatch> shards) {
    net_->train();
    amp_.dtype = at::kBFloat16;
    int64_t micro = 0;
    for (auto& b : shards) {
      stage(b);
      amp_.enter();
      // BUG(torch-device-mismatch): stage() discarded the dense features' copy; they are still on the CPU while the net is on device_.
      auto logits = net_->forward(b.dense, b.ids);
      auto loss = smoothed_logloss(logits, b.clicks, 0.05);
      amp_.exit();
      // OK(torch-autocast-region): a bfloat16 region, closed before backward().
      // BUG(torch-grad-accumulation-unscaled): smoothed_logloss() is a mean and, unlike the retrain, is never passed through scale_for_accumulation().
      loss.backward();
      if (++micro % accum_ == 0) {
        opt_.step();
        opt_.zero_grad();
      }
    }
    amp_.dtype = at::kHalf;
  }

 private:
  void begin_step() { amp_.enter(); }
  void end_step() { amp_.exit(); }

  // False when the shard was skipped.
  bool train_step(const CtrBatch& b) {
    // BUG(torch-autocast-region): [probe: known limit, the switch-on is in begin_step()] the all-negative return below leaves autocast on.
    begin_step();
    auto logits = net_->forward(b.dense.to(device_), b.ids.to(device_));
    if (b.positives == 0) {
      ++stats_.skipped;
      return false;
    }
    auto loss = torch::binary_cross_entropy_with_logits(logits, b.clicks.to(device_));
    end_step();
    // OK(torch-autocast-region, torch-grad-accumulation-unscaled): scaled for float16 and divided by the accumulation.
    (scale_for_accumulation(loss, accum_) * kLossScale).backward();
    // BUG(torch-loss-accumulation-graph): stats_ outlives the step, and the loss joins it with its graph.
    stats_.logloss = stats_.logloss + loss;
    ++stats_.batches;
    return true;
  }

  void apply_step() {
    for (auto& p : net_->parameters())
      if (p.grad().defined()) p.grad().div_(kLossScale);
    opt_.step();
    opt_.zero_grad();
  }

  void stage(CtrBatch& b) {
    // BUG(torch-tensor-to-discarded): the moved copy is dropped; b.dense stays where it was.
    b.dense.to(device_);
    b.ids = b.ids.to(device_);
    b.clicks = b.clicks.to(device_);
  }

  double calibrate_temperature(const std::vector<CtrBatch>& holdout) {
    net_->eval();
    std::vector<torch::Tensor> logits, labels;
    {
      torch::NoGradGuard no_grad;
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() above, under the guard.
      for (const auto& b : holdout) logits.push_back(net_->forward(b.dense.to(device_), b.ids.to(device_)).to(torch::kFloat));
      for (const auto& b : holdout) labels.push_back(b.clicks.to(device_));
    }
    auto z = torch::cat(logits), y = torch::cat(labels);
    auto log_t = torch::zeros({1}, torch::TensorOptions().device(device_).requires_grad(true));
    torch::optim::Adam opt({log_t}, torch::optim::AdamOptions(0.05));
    for (int it = 0; it < 100; ++it) {
      opt.zero_grad();
      auto nll = torch::binary_cross_entropy_with_logits(z / log_t.exp(), y);
      // BUG(torch-autocast-region): when the epoch's last shard was all-negative, train_step() returned with autocast on, and it is still on here.
      nll.backward();
      opt.step();
    }
    return log_t.exp().item<double>();
  }

  CrossNet net_;
  torch::Device device_;
  int64_t accum_;
  torch::optim::Adam opt_;
  AmpContext amp_;
  EpochStats stats_;
};

}  // namespace ctr

int main() {
  using namespace ctr;
  torch::manual_seed(385);
  // OK(torch-cuda-unguarded): guarded selection.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  CtrTrainer trainer(CrossNet(), device, 4);
  trainer.fit(read_shards(70, 256, 0.04), read_shards(8, 256, 0.04), 2);
  trainer.update_intraday(read_shards(16, 256, 0.05));
  return 0;
}
