// Click-through-rate model for a display-ads exchange: six hashed
// categorical fields (site, app, device model, ad category, creative size,
// hour) and eight dense features go through a DeepFM (first-order weights,
// factorisation-machine interactions, an MLP). The day's log is replayed in
// micro-batches of impressions with gradient accumulation; sparse
// embeddings get a larger learning rate than the dense tower through a
// small param-group manager. Every hour the output layer is refreshed on
// the latest traffic, and the auction server scores bid requests.
// LibTorch 1.13 and 2.x.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <unordered_map>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kFields = 6, kBuckets = 1 << 16, kEmbDim = 16, kDense = 8, kAdCategories = 12;

struct DeepFmImpl : nn::Module {
  DeepFmImpl()
      : first_order(register_module("first_order", nn::Embedding(kBuckets, 1))),
        emb(register_module("emb", nn::Embedding(kBuckets, kEmbDim))),
        mlp(register_module("mlp", nn::Sequential(nn::Linear(kFields * kEmbDim + kDense, 128), nn::ReLU(), nn::Dropout(0.2),
                                                  nn::Linear(128, 64), nn::ReLU(), nn::Linear(64, 1)))) {}
  // ids [B, 6] int64, dense [B, 8] -> click logits [B]
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& dense) {
    auto e = emb->forward(ids);
    auto fm = 0.5 * (e.sum(1).pow(2) - e.pow(2).sum(1)).sum(1);
    auto deep = mlp->forward(torch::cat({e.flatten(1), dense}, 1)).squeeze(1);
    return first_order->forward(ids).sum({1, 2}) + fm + deep;
  }
  nn::Embedding first_order, emb;
  nn::Sequential mlp;
};
TORCH_MODULE(DeepFm);

struct ImpressionBatch {
  torch::Tensor ids, dense, clicked, category;  // [B, 6], [B, 8], [B], [B]
  std::vector<int> categories;                  // ad categories present, from the log reader
};

ImpressionBatch make_batch(int64_t n, torch::Device device) {
  ImpressionBatch b;
  b.ids = torch::randint(0, kBuckets, {n, kFields}, torch::TensorOptions().dtype(torch::kLong).device(device));
  b.dense = torch::randn({n, kDense}, device);
  b.clicked = (torch::rand({n}, device) < 0.03).to(torch::kFloat);
  b.category = b.ids.select(1, 3) % kAdCategories;
  for (int c = 0; c < kAdCategories; ++c) b.categories.push_back(c);
  return b;
}

struct TrainConfig {
  int64_t accum_steps = 8;  // micro-batches of impressions per update
  double lr = 1e-3;
  double sparse_lr_mult = 10.0;
  int64_t log_every = 200;
};

bool should_step(int64_t step, const TrainConfig& cfg) { return (step + 1) % cfg.accum_steps == 0; }

// One place to touch the optimizer's parameter groups.
class ParamGroupManager {
 public:
  explicit ParamGroupManager(torch::optim::Optimizer& opt) : opt_(opt) {}
  void zero_grad() { opt_.zero_grad(); }
  void decay_lr(double factor) {
    for (auto& group : opt_.param_groups()) group.options().set_lr(group.options().get_lr() * factor);
  }

 private:
  torch::optim::Optimizer& opt_;
};

std::vector<torch::optim::OptimizerParamGroup> make_groups(DeepFm& net, const TrainConfig& cfg) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto sparse = net->first_order->parameters();
  for (auto& p : net->emb->parameters()) sparse.push_back(p);
  groups.emplace_back(sparse, std::make_unique<torch::optim::AdamOptions>(cfg.lr * cfg.sparse_lr_mult));
  groups.emplace_back(net->mlp->parameters(), std::make_unique<torch::optim::AdamOptions>(cfg.lr));
  return groups;
}

struct DayReport {
  torch::Tensor logloss_sum;
  int64_t batches = 0;
};

class CtrTrainer {
 public:
  CtrTrainer(DeepFm net, const TrainConfig& cfg, torch::Device device)
      : net_(std::move(net)), cfg_(cfg), opt_(make_groups(net_, cfg_), torch::optim::AdamOptions(cfg_.lr)), groups_(opt_),
        hour_loss_(torch::zeros({}, device)) {
    // Hourly dashboard feed; export_hour() reads and resets it.
    on_batch_ = [this](const torch::Tensor& batch_loss, int64_t n) {
      // BUG(torch-loss-accumulation-graph): fit_day() hands over the
      // training loss on every step; the member keeps every graph.
      hour_loss_ += batch_loss * static_cast<double>(n);
      hour_impressions_ += n;
    };
  }

  void fit_day(const std::vector<ImpressionBatch>& day, DayReport& report) {
    net_->train();
    groups_.zero_grad();
    std::unordered_map<int, std::vector<torch::Tensor>> by_category;
    for (size_t step = 0; step < day.size(); ++step) {
      const auto& b = day[step];
      auto per_imp = F::binary_cross_entropy_with_logits(net_->forward(b.ids, b.dense), b.clicked,
                                                         F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone));
      auto loss = per_imp.mean();
      // BUG(torch-grad-accumulation-unscaled): should_step() reads
      // cfg_.accum_steps; the mean log-loss is not divided by it.
      loss.backward();
      if (should_step(static_cast<int64_t>(step), cfg_)) {
        // OK(torch-missing-zero-grad): reset through the manager under the
        // same condition as the step.
        opt_.step();
        groups_.zero_grad();
      }
      for (int c : b.categories) {
        // BUG(torch-loss-accumulation-graph): the per-category slice of the
        // training loss goes into a map that lives for the whole day.
        by_category[c].push_back(per_imp.masked_select(b.category == c).mean());
      }
      // BUG(torch-loss-accumulation-graph): the caller's report outlives
      // every step of the day.
      report.logloss_sum += loss;
      ++report.batches;
      on_batch_(loss, b.clicked.size(0));
    }
    for (const auto& [c, losses] : by_category)
      std::cout << "  category " << c << " log-loss " << torch::stack(losses).mean().item<double>() << '\n';
    groups_.decay_lr(0.95);
  }

  DeepFm& net() { return net_; }
  double export_hour() {
    double mean = hour_loss_.item<double>() / static_cast<double>(hour_impressions_);
    hour_loss_ = torch::zeros_like(hour_loss_);
    hour_impressions_ = 0;
    return mean;
  }

 private:
  DeepFm net_;
  TrainConfig cfg_;
  torch::optim::Adam opt_;
  ParamGroupManager groups_;
  torch::Tensor hour_loss_;
  int64_t hour_impressions_ = 0;
  std::function<void(const torch::Tensor&, int64_t)> on_batch_;
};

// Per-category log-loss on the held-out hour.
std::unordered_map<int, double> evaluate(DeepFm& net, const std::vector<ImpressionBatch>& holdout) {
  torch::NoGradGuard no_grad;
  net->eval();
  std::unordered_map<int, std::vector<torch::Tensor>> by_category;
  for (const auto& b : holdout) {
    auto per_imp = F::binary_cross_entropy_with_logits(net->forward(b.ids, b.dense), b.clicked,
                                                       F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone));
    // OK(torch-loss-accumulation-graph): computed under the no-grad guard.
    for (int c : b.categories) by_category[c].push_back(per_imp.masked_select(b.category == c).mean());
  }
  std::unordered_map<int, double> out;
  for (const auto& [c, losses] : by_category) out[c] = torch::stack(losses).mean().item<double>();
  return out;
}

// Hourly refresh of the output layer, two passes over the hour's traffic.
void refresh_output_layer(DeepFm& net, const std::vector<ImpressionBatch>& hour, double lr) {
  net->train();
  torch::optim::SGD opt(net->mlp[5]->parameters(), torch::optim::SGDOptions(lr));
  ParamGroupManager groups(opt);
  for (int pass = 0; pass < 2; ++pass) {
    groups.zero_grad();
    for (const auto& b : hour) {
      auto loss = F::binary_cross_entropy_with_logits(net->forward(b.ids, b.dense), b.clicked);
      loss.backward();
      // BUG(torch-missing-zero-grad): the manager clears the gradients once
      // per pass; every batch's step applies all earlier batches' gradients.
      opt.step();
    }
  }
}

class AuctionScorer {
 public:
  explicit AuctionScorer(DeepFm net) : net_(std::move(net)) { net_->eval(); }
  // Click probabilities for one bid request's candidate ads.
  torch::Tensor score(const ImpressionBatch& request) {
    // BUG(torch-inference-without-no-grad): serve() calls this on every
    // request with autograd on; every forward records a graph.
    return torch::sigmoid(net_->forward(request.ids, request.dense));
  }
  // Shadow traffic for the next model, scored under the guard.
  torch::Tensor shadow_score(const ImpressionBatch& request) {
    torch::NoGradGuard no_grad;
    // OK(torch-inference-without-no-grad): guarded here.
    return torch::sigmoid(net_->forward(request.ids, request.dense));
  }

 private:
  DeepFm net_;
};

void serve(AuctionScorer& scorer, const std::vector<ImpressionBatch>& requests) {
  double best = 0.0;
  for (const auto& r : requests) best += scorer.score(r).max().item<double>();
  std::cout << "mean top pCTR " << best / static_cast<double>(requests.size()) << '\n';
}

void shadow(AuctionScorer& scorer, const std::vector<ImpressionBatch>& requests) {
  double total = 0.0;
  for (const auto& r : requests) total += scorer.shadow_score(r).mean().item<double>();
  std::cout << "shadow mean pCTR " << total / static_cast<double>(requests.size()) << '\n';
}

int main() {
  torch::manual_seed(373);
  // OK(torch-cuda-unguarded): guarded selection.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  DeepFm net;
  net->to(device);
  std::vector<ImpressionBatch> day, hour, holdout, requests;
  for (int i = 0; i < 96; ++i) day.push_back(make_batch(4096, device));
  for (int i = 0; i < 8; ++i) hour.push_back(make_batch(4096, device));
  for (int i = 0; i < 8; ++i) holdout.push_back(make_batch(4096, device));
  for (int i = 0; i < 32; ++i) requests.push_back(make_batch(20, device));

  TrainConfig cfg;
  CtrTrainer trainer(net, cfg, device);
  DayReport report;
  report.logloss_sum = torch::zeros({}, device);
  trainer.fit_day(day, report);
  std::cout << "dashboard log-loss " << trainer.export_hour() << '\n';
  std::cout << "day log-loss " << (report.logloss_sum / static_cast<double>(report.batches)).item<double>() << '\n';
  for (const auto& [c, ll] : evaluate(trainer.net(), holdout)) std::cout << "holdout category " << c << ": " << ll << '\n';

  refresh_output_layer(net, hour, 1e-3);
  AuctionScorer scorer(net);
  serve(scorer, requests);
  shadow(scorer, requests);
}
