// Click-through-rate prediction with a DeepFM model over hashed categorical
// fields and a few dense counters. Field-local ids are turned into rows of
// one shared embedding table by a FieldHasher; a FieldSchema validates every
// batch. Mixed precision uses a RAII scope and a static loss scaler ported
// from Apex; the engine tracks the log loss per traffic source.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#if TORCH_VERSION_MAJOR >= 2
#define CTR_AUTOCAST(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#define CTR_AUTOCAST_IS_ON() at::autocast::is_autocast_enabled(at::kCUDA)
#else
#define CTR_AUTOCAST(on) at::autocast::set_enabled(on)
#define CTR_AUTOCAST_IS_ON() at::autocast::is_enabled()
#endif

namespace F = torch::nn::functional;

constexpr int64_t kDense = 13, kEmb = 16;

struct CtrBatch {
  torch::Tensor sparse;  // [B, fields] field-local ids, int64
  torch::Tensor dense;   // [B, kDense]
  torch::Tensor clicks;  // [B] 0/1 float
  std::string source;    // "search", "feed", ...
};

class FieldSchema {
 public:
  explicit FieldSchema(std::vector<int64_t> cardinalities) : card_(std::move(cardinalities)) {}
  int64_t num_fields() const { return static_cast<int64_t>(card_.size()); }
  int64_t total_rows() const { return std::accumulate(card_.begin(), card_.end(), int64_t{0}); }
  const std::vector<int64_t> &cardinalities() const { return card_; }
  void check(const CtrBatch &b) const {
    if (b.sparse.dim() != 2 || b.sparse.size(1) != num_fields())
      throw std::invalid_argument("batch from '" + b.source + "' does not match the field schema");
  }

 private:
  std::vector<int64_t> card_;
};

// Maps field-local ids to rows of the shared table: row = offset[field] + id.
class FieldHasher {
 public:
  explicit FieldHasher(const FieldSchema &schema) {
    std::vector<int64_t> offsets(schema.cardinalities().size(), 0);
    for (size_t f = 1; f < offsets.size(); ++f) offsets[f] = offsets[f - 1] + schema.cardinalities()[f - 1];
    offsets_ = torch::tensor(offsets, torch::kLong).view({1, -1});
  }
  torch::Tensor global_ids(const torch::Tensor &local) const { return local + offsets_; }

 private:
  torch::Tensor offsets_;
};

struct DeepFMImpl : torch::nn::Module {
  DeepFMImpl(int64_t rows, int64_t fields)
      : table(register_module("table", torch::nn::Embedding(rows, kEmb))),
        linear(register_module("linear", torch::nn::Embedding(rows, 1))),
        dense_proj(register_module("dense_proj", torch::nn::Linear(kDense, kEmb))),
        mlp(register_module("mlp", torch::nn::Sequential(torch::nn::Linear((fields + 1) * kEmb, 128),
                                                         torch::nn::BatchNorm1d(128), torch::nn::ReLU(),
                                                         torch::nn::Dropout(0.3), torch::nn::Linear(128, 1)))) {}
  // ids [B, F] global rows, dense [B, kDense] -> click logits [B]
  torch::Tensor forward(const torch::Tensor &ids, const torch::Tensor &dense) {
    auto e = torch::cat({table->forward(ids), dense_proj->forward(dense).unsqueeze(1)}, 1);  // [B, F+1, E]
    auto fm = 0.5 * (e.sum(1).pow(2) - e.pow(2).sum(1)).sum(1);
    auto first = linear->forward(ids).sum({1, 2});
    return first + fm + mlp->forward(e.flatten(1)).squeeze(1);
  }
  torch::nn::Embedding table, linear;
  torch::nn::Linear dense_proj;
  torch::nn::Sequential mlp;
};
TORCH_MODULE(DeepFM);

// Autocast for one scope when asked; restores the thread's previous state.
class AmpScope {
 public:
  explicit AmpScope(bool on) : was_on_(CTR_AUTOCAST_IS_ON()) {
    if (on) CTR_AUTOCAST(true);
  }
  ~AmpScope() { CTR_AUTOCAST(was_on_); }

 private:
  bool was_on_;
};

// Static loss scaling: scale the loss up before backward, the gradients down
// before the update.
class LossScaler {
 public:
  explicit LossScaler(double scale)
      : scale_(scale),
        // BUG(torch-cuda-unguarded): the engine builds its scaler on every
        // machine, also when main() fell back to the CPU.
        inv_scale_(torch::full({}, 1.0 / scale, torch::TensorOptions().device(torch::kCUDA))) {}
  torch::Tensor scale(const torch::Tensor &loss) const { return loss * scale_; }
  void unscale_(const std::vector<torch::Tensor> &params) const {
    for (const auto &p : params)
      if (p.grad().defined()) p.grad().mul_(inv_scale_);
  }

 private:
  double scale_;
  torch::Tensor inv_scale_;
};

struct StepInfo {
  int64_t step;
  torch::Tensor loss;
};

class Engine {
 public:
  Engine(const FieldSchema &schema, torch::Device device)
      : schema_(schema), hasher_(schema), device_(device), use_amp_(device.is_cuda()),
        model_(schema.total_rows(), schema.num_fields()), scaler_(1024.0) {
    model_->to(device_);
    opt_ = std::make_shared<torch::optim::Adam>(model_->parameters(), torch::optim::AdamOptions(1e-3));
  }

  torch::Tensor train_step(const CtrBatch &batch) {
    schema_.check(batch);
    opt_->zero_grad();
    // BUG(torch-device-mismatch): the ids are on the engine's device, the
    // hasher's offsets were built on the host.
    auto ids = hasher_.global_ids(batch.sparse.to(device_));
    auto dense = batch.dense.to(device_);
    auto clicks = batch.clicks.to(device_);
    torch::Tensor loss;
    {
      AmpScope amp(use_amp_);
      auto logits = model_->forward(ids, dense);
      loss = F::binary_cross_entropy_with_logits(logits.to(torch::kFloat), clicks);
    }
    // OK(torch-autocast-region): the scope closed the region, and the loss
    // is scaled before backward().
    scaler_.scale(loss).backward();
    scaler_.unscale_(model_->parameters());
    torch::nn::utils::clip_grad_norm_(model_->parameters(), 10.0);
    // OK(torch-missing-zero-grad): zero_grad() opens every step.
    opt_->step();
    // BUG(torch-loss-accumulation-graph): the per-source totals live in the
    // engine for the whole epoch and keep every step's graph.
    slice_loss_[batch.source] += loss;
    slice_steps_[batch.source] += 1;
    return loss.detach();
  }

  double evaluate(const std::vector<CtrBatch> &held_out) {
    torch::NoGradGuard no_grad;
    model_->eval();
    double nll = 0.0;
    int64_t n = 0;
    // BUG(torch-autocast-region): schema_.check() throws on a malformed batch
    // and leaves autocast on for the rest of the thread.
    CTR_AUTOCAST(true);
    for (const auto &b : held_out) {
      schema_.check(b);
      // OK(torch-device-mismatch): hashed on the host, then moved.
      auto ids = hasher_.global_ids(b.sparse).to(device_);
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval()
      // and a NoGradGuard above.
      auto logits = model_->forward(ids, b.dense.to(device_));
      auto sum = F::binary_cross_entropy_with_logits(logits.to(torch::kFloat), b.clicks.to(device_),
                                                     F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kSum));
      // OK(torch-host-sync-in-loop): evaluation, no training step.
      nll += sum.item<double>();
      n += b.clicks.size(0);
    }
    CTR_AUTOCAST(false);
    model_->train();
    return nll / static_cast<double>(n > 0 ? n : 1);
  }

  void report_slices() {
    for (auto &[source, total] : slice_loss_)
      std::cout << "  " << source << ": " << total.item<double>() / static_cast<double>(slice_steps_[source]) << "\n";
    slice_loss_.clear();
    slice_steps_.clear();
  }

  void init_slices(const std::vector<std::string> &sources) {
    for (const auto &s : sources) slice_loss_[s] = torch::zeros({}, device_);
  }

 private:
  FieldSchema schema_;
  FieldHasher hasher_;
  torch::Device device_;
  bool use_amp_;
  DeepFM model_;
  LossScaler scaler_;
  std::shared_ptr<torch::optim::Adam> opt_;
  std::map<std::string, torch::Tensor> slice_loss_;
  std::map<std::string, int64_t> slice_steps_;
};

CtrBatch synthetic_batch(const FieldSchema &schema, int64_t b, const std::string &source) {
  std::vector<torch::Tensor> cols;
  for (int64_t card : schema.cardinalities()) cols.push_back(torch::randint(0, card, {b, 1}, torch::kLong));
  return {torch::cat(cols, 1), torch::randn({b, kDense}).abs().log1p(), torch::randint(0, 2, {b}).to(torch::kFloat), source};
}

int main() {
  torch::manual_seed(257);
  // OK(torch-cuda-unguarded): the ternary checks for a GPU.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  FieldSchema schema({1000, 500, 20000, 64, 7, 300});
  Engine engine(schema, device);
  const std::vector<std::string> sources = {"search", "feed", "email"};

  std::vector<std::function<void(const StepInfo &)>> callbacks;
  torch::Tensor window = torch::zeros({}, device);
  callbacks.push_back([&](const StepInfo &s) {
    // OK(torch-loss-accumulation-graph): train_step() returned it detached.
    window += s.loss;
    if (s.step % 500 == 499) {
      // OK(torch-host-sync-in-loop): once every 500 steps.
      std::cout << "step " << s.step << " logloss " << (window / 500).item<double>() << "\n";
      window.zero_();
    }
  });

  std::vector<CtrBatch> held_out;
  for (int i = 0; i < 20; ++i) held_out.push_back(synthetic_batch(schema, 1024, sources[static_cast<size_t>(i) % 3]));

  int64_t step = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    engine.init_slices(sources);
    for (int i = 0; i < 3000; ++i) {
      auto batch = synthetic_batch(schema, 512, sources[static_cast<size_t>(i) % sources.size()]);
      auto loss = engine.train_step(batch);
      const StepInfo info{step++, loss};
      for (auto &cb : callbacks) cb(info);
    }
    std::cout << "epoch " << epoch << " held-out logloss " << engine.evaluate(held_out) << "\n";
    engine.report_slices();
  }
  return 0;
}
