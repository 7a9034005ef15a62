// Card-fraud detection on tabular transactions: an MLP over numeric features
// and a merchant-category embedding, trained with a weighted BCE plus a focal
// term. The update rule is chosen at start-up (plain Adam or Lookahead on top
// of it); per-term losses go into a MetricTracker keyed by name, and a host
// histogram gives a running ROC-AUC. A warm start accumulates micro-batches
// before one backward. The nightly scoring job scores the day's shards and
// counts the transactions over the review threshold.
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace fraud {

constexpr int64_t kFeatures = 30, kMerchants = 400;

struct Config {
  int64_t batch = 256, steps = 150, micro_batches = 4, lookahead_k = 5;
  double lr = 1e-3, pos_weight = 20.0, focal_weight = 0.5, threshold = 0.8;
  bool check_finite = false;
};

struct FraudNetImpl : nn::Module {
  FraudNetImpl()
      : merchant(register_module("merchant", nn::Embedding(kMerchants, 16))),
        mlp(register_module("mlp", nn::Sequential(nn::Linear(kFeatures + 16, 128), nn::ReLU(), nn::Dropout(0.2),
                                                  nn::Linear(128, 64), nn::ReLU(), nn::Linear(64, 1)))) {}
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &mcc) {
    return mlp->forward(torch::cat({x, merchant->forward(mcc)}, 1)).squeeze(1);
  }
  nn::Embedding merchant;
  nn::Sequential mlp;
};
TORCH_MODULE(FraudNet);

struct Batch { torch::Tensor x, mcc, y; };
Batch synth_batch(int64_t n) {
  auto x = torch::randn({n, kFeatures});
  auto mcc = torch::randint(0, kMerchants, {n}, torch::kLong);
  auto y = ((x.select(1, 0) + 0.5 * x.select(1, 3) > 2.3) | (mcc == 7)).to(torch::kFloat);
  return {x, mcc, y};
}

struct LossTerms { torch::Tensor bce, focal; };
LossTerms criterion(const torch::Tensor &logits, const torch::Tensor &y, double pos_weight) {
  auto pw = torch::full({1}, pos_weight, logits.options());
  auto bce = F::binary_cross_entropy_with_logits(logits, y, F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(pw));
  auto p = torch::sigmoid(logits);
  auto pt = y * p + (1 - y) * (1 - p);
  return {bce, (-(1 - pt).pow(2) * torch::log(pt.clamp_min(1e-6))).mean()};
}

// Running sums of a fixed set of named scalars; read once per epoch.
class MetricTracker {
 public:
  MetricTracker(std::vector<std::string> names, torch::Device device) : names_(std::move(names)), device_(device) {}
  void reset() {
    for (const auto &n : names_) sums_[n] = torch::zeros({}, torch::TensorOptions().device(device_));
    count_ = 0;
  }
  // values[i] belongs to names_[i].
  void update(const torch::Tensor &values) {
    for (size_t i = 0; i < names_.size(); ++i)
      // BUG(torch-loss-accumulation-graph): train_epoch() hands the stacked live losses; each sum keeps every step's graph.
      sums_[names_[i]] += values[static_cast<int64_t>(i)];
    ++count_;
  }
  std::map<std::string, double> means() const {
    std::map<std::string, double> out;
    for (const auto &kv : sums_) out[kv.first] = kv.second.item<double>() / static_cast<double>(std::max<int64_t>(count_, 1));
    return out;
  }
 private:
  std::vector<std::string> names_;
  torch::Device device_;
  std::map<std::string, torch::Tensor> sums_;
  int64_t count_ = 0;
};

struct UpdateRule {
  virtual ~UpdateRule() = default;
  virtual void apply() = 0;  // one optimizer update after backward()
};

struct PlainRule : UpdateRule {
  PlainRule(FraudNet model, double lr) : opt_(model->parameters(), torch::optim::AdamOptions(lr)) {}
  void apply() override {
    // OK(torch-missing-zero-grad): cleared right after the step.
    opt_.step();
    opt_.zero_grad();
  }
  torch::optim::Adam opt_;
};

// Lookahead: fast Adam steps, pulled towards slow weights every k steps.
class LookaheadRule : public UpdateRule {
 public:
  LookaheadRule(FraudNet model, double lr, int64_t k) : model_(model), opt_(model->parameters(), torch::optim::AdamOptions(lr)), k_(k) {
    for (const auto &p : model_->parameters()) slow_.push_back(p.detach().clone());
  }
  void apply() override {
    // BUG(torch-missing-zero-grad): the gradients are only cleared on the sync steps; the k-1 fast steps in between apply accumulated gradients.
    opt_.step();
    if (++fast_steps_ % k_ == 0) {
      torch::NoGradGuard no_grad;
      auto params = model_->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        slow_[i] += 0.5 * (params[i] - slow_[i]);
        params[i].copy_(slow_[i]);
      }
      opt_.zero_grad();
    }
  }
 private:
  FraudNet model_;
  torch::optim::Adam opt_;
  int64_t k_, fast_steps_ = 0;
  std::vector<torch::Tensor> slow_;
};

// Histogram of host scores by label; AUC from the binned ROC curve.
struct ScoreHistogram {
  std::array<int64_t, 50> pos{}, neg{};
  void add(const torch::Tensor &scores, const torch::Tensor &labels) {
    auto s = scores.accessor<float, 1>();
    auto l = labels.accessor<float, 1>();
    for (int64_t i = 0; i < s.size(0); ++i) (l[i] > 0.5f ? pos : neg)[std::min<size_t>(49, static_cast<size_t>(s[i] * 50))]++;
  }
  double auc() const {
    double area = 0, neg_below = 0, total_pos = 0, total_neg = 0;
    for (size_t b = 0; b < 50; ++b) total_pos += pos[b], total_neg += neg[b];
    for (size_t b = 0; b < 50; ++b) area += pos[b] * (neg_below + 0.5 * neg[b]), neg_below += neg[b];
    return total_pos * total_neg > 0 ? area / (total_pos * total_neg) : 0.5;
  }
};

void train_epoch(FraudNet &model, UpdateRule &rule, MetricTracker &tracker, ScoreHistogram &hist, const Config &cfg, torch::Device device) {
  model->train();
  tracker.reset();
  for (int64_t step = 0; step < cfg.steps; ++step) {
    auto b = synth_batch(cfg.batch);
    auto logits = model->forward(b.x.to(device), b.mcc.to(device));
    auto terms = criterion(logits, b.y.to(device), cfg.pos_weight);
    auto loss = terms.bce + cfg.focal_weight * terms.focal;
    // OK(torch-host-sync-in-loop): the finiteness check only runs when the config asks for it.
    if (cfg.check_finite && !torch::isfinite(loss).all().item<bool>()) throw std::runtime_error("non-finite loss");
    loss.backward();
    rule.apply();
    tracker.update(torch::stack({loss, terms.bce, terms.focal}));
    // BUG(torch-host-sync-in-loop): the scores are copied back with a blocking to(kCPU) on every step for the histogram.
    hist.add(torch::sigmoid(logits.detach()).to(torch::kCPU), b.y);
  }
}

// Warm start on a small labelled set: micro-batches summed into one backward.
void warm_start(FraudNet &model, const Config &cfg, torch::Device device) {
  model->train();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(cfg.lr * 10));
  for (int64_t round = 0; round < 10; ++round) {
    opt.zero_grad();
    auto total = torch::zeros({}, device);
    for (int64_t m = 0; m < cfg.micro_batches; ++m) {
      auto b = synth_batch(cfg.batch / cfg.micro_batches);
      // OK(torch-inference-without-no-grad, torch-eval-mode-missing): a training forward; its loss reaches total.backward() after the loop.
      auto terms = criterion(model->forward(b.x.to(device), b.mcc.to(device)), b.y.to(device), cfg.pos_weight);
      // OK(torch-loss-accumulation-graph): keeping the micro-batch graphs is the point; total.backward() runs through them.
      total += terms.bce / static_cast<double>(cfg.micro_batches);
    }
    total.backward();
    opt.step();
  }
}

// Synchronises the device when the scope ends.
struct DeviceFence {
  explicit DeviceFence(torch::Device device) : cuda(device.is_cuda()) {}
  ~DeviceFence() { if (cuda) torch::cuda::synchronize(); }
  bool cuda;
};

class ScoringJob {
 public:
  ScoringJob(FraudNet model, torch::Device device, double threshold) : model_(std::move(model)), device_(device), threshold_(threshold) {
    model_->to(device_);
    model_->eval();
  }

  int64_t count_flagged(const std::vector<Batch> &shards) {
    std::vector<torch::Tensor> pending;
    {
      c10::InferenceMode guard;
      for (const auto &s : shards)
        pending.push_back(torch::sigmoid(model_->forward(s.x.to(device_), s.mcc.to(device_))).to(torch::kCPU, /*non_blocking=*/true));
    }
    int64_t flagged = 0;
    for (const auto &h : pending)
      // BUG(torch-non-blocking-d2h-race): nothing waited for the shards' copies before the threshold comparison.
      flagged += (h > threshold_).sum().item<int64_t>();
    return flagged;
  }

  float riskiest(const Batch &b) {
    torch::Tensor host;
    {
      DeviceFence fence(device_);
      c10::InferenceMode guard;
      host = torch::sigmoid(model_->forward(b.x.to(device_), b.mcc.to(device_))).to(torch::kCPU, /*non_blocking=*/true);
    }
    // OK(torch-non-blocking-d2h-race): the fence synchronised when its scope ended.
    const float *p = host.data_ptr<float>();
    return *std::max_element(p, p + host.numel());
  }
 private:
  FraudNet model_;
  torch::Device device_;
  double threshold_;
};

}  // namespace fraud
int main(int argc, char **argv) {
  using namespace fraud;
  torch::manual_seed(362);
  Config cfg;
  // OK(torch-cuda-unguarded): CUDA only when available.
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  FraudNet model;
  model->to(device);
  warm_start(model, cfg, device);

  std::unique_ptr<UpdateRule> rule;
  if (argc > 1 && std::string(argv[1]) == "--lookahead")
    rule = std::make_unique<LookaheadRule>(model, cfg.lr, cfg.lookahead_k);
  else
    rule = std::make_unique<PlainRule>(model, cfg.lr);
  MetricTracker tracker({"loss", "bce", "focal"}, device);
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    ScoreHistogram hist;
    train_epoch(model, *rule, tracker, hist, cfg, device);
    const auto m = tracker.means();
    std::cout << "epoch " << epoch << " loss " << m.at("loss") << " bce " << m.at("bce") << " focal " << m.at("focal")
              << " auc " << hist.auc() << '\n';
  }

  ScoringJob job(model, device, cfg.threshold);
  std::vector<Batch> shards(8);
  std::generate(shards.begin(), shards.end(), [] { return synth_batch(4096); });
  std::cout << "flagged " << job.count_flagged(shards) << " riskiest " << job.riskiest(shards.front()) << '\n';
  return 0;
}
