// Fraud detection on a transaction graph: accounts are nodes, transfers are
// edges, and a two-layer gated edge-attention network labels accounts as
// mule/fraud. Batches are sampled neighbourhoods with a fixed fan-out. The
// objective is chosen at start-up through a small class hierarchy; each step
// hands back its loss and logits, an epoch-stats helper keeps calibration
// sums, and a callback from main() records the loss curve. The alert service
// scores accounts into review tiers with per-region thresholds, and re-samples
// wider neighbourhoods for the analysts' explanations.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace fraudgraph {

constexpr int64_t kFeat = 24, kHidden = 64, kRegions = 4;

struct Config {
  explicit Config(torch::Device d) : device(d) {}
  torch::Device device;
  int64_t nodes = 512, fanout = 8;
  double lr = 3e-3;
};

struct EdgeAttnLayerImpl : nn::Module {
  EdgeAttnLayerImpl(int64_t in, int64_t out)
      : q(register_module("q", nn::Linear(in, out))), k(register_module("k", nn::Linear(in, out))),
        v(register_module("v", nn::Linear(in, out))), self_fc(register_module("self_fc", nn::Linear(in, out))) {}

  // x: N x in; src, dst: E (message flows src -> dst)
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &src, const torch::Tensor &dst) {
    auto qd = q(x).index_select(0, dst);
    auto ks = k(x).index_select(0, src);
    auto vs = v(x).index_select(0, src);
    auto gate = torch::sigmoid((qd * ks).sum(1, true) / std::sqrt(static_cast<double>(qd.size(1))));
    auto agg = torch::zeros({x.size(0), vs.size(1)}, vs.options()).index_add(0, dst, gate * vs);
    return torch::relu(self_fc(x) + agg);
  }

  nn::Linear q, k, v, self_fc;
};
TORCH_MODULE(EdgeAttnLayer);

struct FraudGatImpl : nn::Module {
  FraudGatImpl()
      : l1(register_module("l1", EdgeAttnLayer(kFeat, kHidden))), l2(register_module("l2", EdgeAttnLayer(kHidden, kHidden))),
        drop(register_module("drop", nn::Dropout(0.3))), head(register_module("head", nn::Linear(kHidden, 1))) {}
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &src, const torch::Tensor &dst) {
    auto h = drop(l1(x, src, dst));
    return head(l2(h, src, dst)).squeeze(1);
  }
  EdgeAttnLayer l1, l2;
  nn::Dropout drop;
  nn::Linear head;
};
TORCH_MODULE(FraudGat);

struct GraphBatch {
  torch::Tensor x, src, dst, y;
};

GraphBatch sample_batch(int64_t nodes, int64_t fanout) {
  auto x = torch::randn({nodes, kFeat});
  auto dst = torch::arange(nodes, torch::kLong).repeat_interleave(fanout);
  auto src = torch::randint(0, nodes, {nodes * fanout}, torch::kLong);
  // Mule rings: accounts whose counterparties share a device fingerprint.
  auto ring = x.select(1, 0).index_select(0, src).view({nodes, fanout}).mean(1);
  return {x, src, dst, ((ring * 2.0 + 0.3 * x.select(1, 1)) > 0.9).to(torch::kFloat)};
}

// A wider neighbourhood for an explanation: edges relabelled to local ids, {src, dst}.
std::pair<torch::Tensor, torch::Tensor> resample_edges(int64_t nodes, int64_t fanout, const torch::Device &device) {
  auto dst = torch::arange(nodes, torch::kLong).repeat_interleave(fanout);
  auto src = torch::randint(0, nodes, {nodes * fanout}, torch::kLong);
  return {src.to(device), dst};
}

struct Objective {
  virtual ~Objective() = default;
  virtual torch::Tensor operator()(const torch::Tensor &logits, const torch::Tensor &y) = 0;
};

struct WeightedBce : Objective {
  explicit WeightedBce(double pos_weight) : pos_weight_(torch::full({1}, pos_weight)) {}
  torch::Tensor operator()(const torch::Tensor &logits, const torch::Tensor &y) override {
    return F::binary_cross_entropy_with_logits(logits, y, F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(pos_weight_));
  }
  torch::Tensor pos_weight_;
};

struct FocalBce : Objective {
  explicit FocalBce(double gamma) : gamma_(gamma) {}
  torch::Tensor operator()(const torch::Tensor &logits, const torch::Tensor &y) override {
    auto p = torch::sigmoid(logits);
    auto pt = y * p + (1 - y) * (1 - p);
    return (-(1 - pt).pow(gamma_) * torch::log(pt.clamp_min(1e-6))).mean();
  }
  double gamma_;
};

struct EpochStats {
  torch::Tensor loss_sum, fraud_score_sum;
  int64_t steps = 0;
};

void accumulate(EpochStats &s, const torch::Tensor &loss, const torch::Tensor &logits, const torch::Tensor &y) {
  // OK(torch-loss-accumulation-graph): the loss is detached before it is summed.
  s.loss_sum += loss.detach();
  // BUG(torch-loss-accumulation-graph): the logits are the step's live model output; the calibration sum keeps every graph.
  s.fraud_score_sum += torch::sigmoid(logits).masked_select(y > 0.5).sum();
  ++s.steps;
}

class GraphTrainer {
 public:
  GraphTrainer(const Config &cfg, std::unique_ptr<Objective> objective, std::function<void(const torch::Tensor &)> on_step)
      : cfg_(cfg), objective_(std::move(objective)), on_step_(std::move(on_step)),
        opt_(model_->parameters(), torch::optim::AdamOptions(cfg.lr)) {
    model_->to(cfg_.device);
  }

  std::tuple<torch::Tensor, torch::Tensor> step(const GraphBatch &b) {
    auto x = b.x.to(cfg_.device);
    auto y = b.y.to(cfg_.device);
    opt_.zero_grad();
    // OK(torch-device-mismatch): the batch's edges are moved with the features.
    auto logits = model_->forward(x, b.src.to(cfg_.device), b.dst.to(cfg_.device));
    // BUG(torch-device-mismatch): WeightedBce keeps its pos_weight on the CPU; the logits are on cfg_.device.
    auto loss = (*objective_)(logits, y);
    loss.backward();
    opt_.step();
    on_step_(loss);
    return {loss, logits};
  }

  void fit(int64_t steps, int64_t epoch) {
    model_->train();
    EpochStats stats{torch::zeros({}, torch::TensorOptions().device(cfg_.device)),
                     torch::zeros({}, torch::TensorOptions().device(cfg_.device))};
    auto running = torch::zeros({}, torch::TensorOptions().device(cfg_.device));
    int64_t positives = 0;
    for (int64_t s = 0; s < steps; ++s) {
      auto batch = sample_batch(cfg_.nodes, cfg_.fanout);
      // OK(torch-host-sync-in-loop): the labels are still on the host here.
      positives += batch.y.sum().item<int64_t>();
      auto [loss, logits] = step(batch);
      // BUG(torch-loss-accumulation-graph): step() hands back the loss it ran backward() on; the running sum keeps each graph.
      running += loss;
      accumulate(stats, loss, logits, batch.y.to(cfg_.device));
    }
    std::cout << "epoch " << epoch << " loss " << (running / static_cast<double>(steps)).item<double>() << " mean fraud score "
              << (stats.fraud_score_sum / std::max<int64_t>(positives, 1)).item<double>() << '\n';
  }

  FraudGat &model() { return model_; }

 private:
  Config cfg_;
  FraudGat model_;
  std::unique_ptr<Objective> objective_;
  std::function<void(const torch::Tensor &)> on_step_;
  torch::optim::Adam opt_;
};

class AlertService {
 public:
  AlertService(FraudGat model, torch::Device device) : model_(std::move(model)), device_(device) {
    model_->to(device_);
    // Review / hold / block thresholds, calibrated per region.
    for (int64_t r = 0; r < kRegions; ++r) thresholds_[r] = torch::tensor({0.5, 0.8, 0.95}) - 0.02 * static_cast<double>(r);
  }

  // Review tier (0 = none .. 3 = block) of every account in the batch.
  torch::Tensor tiers(const GraphBatch &b, int64_t region) {
    torch::NoGradGuard no_grad;
    model_->eval();
    auto p = torch::sigmoid(model_->forward(b.x.to(device_), b.src.to(device_), b.dst.to(device_)));
    // BUG(torch-device-mismatch): the region's thresholds were cached on the CPU; the scores are on 'device_'.
    return (p.unsqueeze(1) >= thresholds_.at(region)).sum(1);
  }

  // Scores of the same accounts over a wider neighbourhood, for the analysts.
  torch::Tensor explain(const GraphBatch &b, int64_t fanout) {
    torch::NoGradGuard no_grad;
    model_->eval();
    auto [src, dst] = resample_edges(b.x.size(0), fanout, device_);
    // BUG(torch-device-mismatch): resample_edges() moved src but left dst on the CPU; the attention layers index device tensors with it.
    auto logits = model_->forward(b.x.to(device_), src, dst);
    return torch::sigmoid(logits);
  }

 private:
  FraudGat model_;
  torch::Device device_;
  std::unordered_map<int64_t, torch::Tensor> thresholds_;
};

}  // namespace fraudgraph

int main() {
  using namespace fraudgraph;
  torch::manual_seed(390);
  // OK(torch-cuda-unguarded): CUDA only when the runtime reports it.
  Config cfg(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  std::vector<float> curve;
  GraphTrainer trainer(cfg, std::make_unique<WeightedBce>(30.0), [&curve](const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): the trainer calls this on every step; the loss is read on the host each time.
    curve.push_back(loss.item<float>());
  });
  for (int64_t epoch = 0; epoch < 4; ++epoch) trainer.fit(60, epoch);
  std::cout << "recorded " << curve.size() << " losses, last " << (curve.empty() ? 0.f : curve.back()) << '\n';

  AlertService alerts(trainer.model(), cfg.device);
  auto batch = sample_batch(cfg.nodes, cfg.fanout);
  auto tiers = alerts.tiers(batch, 2);
  auto wide = alerts.explain(batch, 3 * cfg.fanout);
  std::cout << "blocked " << (tiers == 3).sum().item<int64_t>() << " mean wide score " << wide.mean().item<double>() << '\n';
  return 0;
}
