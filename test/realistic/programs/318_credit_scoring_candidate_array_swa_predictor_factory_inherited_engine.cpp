// Credit default scoring on 32 normalised bureau and application features.
// Three scorecard networks of a small hyper-parameter grid live in a
// std::array; each is trained with the last epochs' weights kept as
// snapshots, the best by validation AUC becomes the champion. The champion's
// snapshots are averaged (SWA) and the averaged model is scored as well; the
// champion is fine-tuned on the latest quarter's applications, saved, and a
// batch risk engine reloads it to decide the nightly application file.
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace credit {

constexpr int64_t kFeatures = 32;

struct Applications {
  torch::Tensor x;          // [N, 32]
  torch::Tensor defaulted;  // [N, 1], 1 = defaulted within 12 months
};

Applications synth(int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  auto x = torch::randn({n, kFeatures});
  auto risk = x.slice(1, 0, 4).sum(1, true) - 0.5 * x.slice(1, 4, 6).sum(1, true) - 2.0;
  return {x, torch::bernoulli(torch::sigmoid(risk))};
}

struct NetConfig {
  int64_t hidden;
  double dropout;
};
const std::array<NetConfig, 3> kGrid{{{64, 0.1}, {128, 0.2}, {256, 0.3}}};

struct ScorecardNetImpl : nn::Module {
  explicit ScorecardNetImpl(const NetConfig &cfg)
      : fc(register_module("fc", nn::Linear(kFeatures, cfg.hidden))),
        norm(register_module("norm", nn::LayerNorm(nn::LayerNormOptions({cfg.hidden})))),
        drop(register_module("drop", nn::Dropout(cfg.dropout))),
        out(register_module("out", nn::Linear(cfg.hidden, 1))) {}
  torch::Tensor forward(const torch::Tensor &x) { return out->forward(drop->forward(torch::gelu(norm->forward(fc->forward(x))))); }
  nn::Linear fc;
  nn::LayerNorm norm;
  nn::Dropout drop;
  nn::Linear out;
};
TORCH_MODULE(ScorecardNet);

using Snapshot = std::vector<torch::Tensor>;
using Predictor = std::function<torch::Tensor(const torch::Tensor &)>;

}  // namespace credit

using credit::Applications;
using credit::ScorecardNet;

// Probability of default; the caller decides the module's mode.
credit::Predictor make_predictor(ScorecardNet net) {
  return [net](const torch::Tensor &x) mutable {
    torch::NoGradGuard no_grad;
    // BUG(torch-eval-mode-missing): main() hands the SWA average straight
    // from average_checkpoints(), fresh and in training mode: dropout on.
    // OK(torch-inference-without-no-grad): the lambda holds its own guard.
    return torch::sigmoid(net->forward(x));
  };
}

// Rank AUC (Mann-Whitney U) of the predictor on a labelled set.
double auc(const credit::Predictor &predict, const Applications &data, const torch::Device &device) {
  std::vector<torch::Tensor> scores;
  for (int64_t i = 0; i < data.x.size(0); i += 512)
    scores.push_back(predict(data.x.slice(0, i, i + 512).to(device)).cpu());
  auto s = torch::cat(scores).squeeze(1);
  auto y = data.defaulted.squeeze(1).to(torch::kDouble);
  auto ranks = s.argsort().argsort().to(torch::kDouble) + 1.0;
  const double pos = y.sum().item<double>(), neg = static_cast<double>(y.size(0)) - pos;
  return ((ranks * y).sum().item<double>() - pos * (pos + 1.0) / 2.0) / std::max(1.0, pos * neg);
}

void train_with_snapshots(ScorecardNet &net, const Applications &train, const torch::Device &device, int epochs,
                          std::vector<credit::Snapshot> &snapshots) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const auto pos_weight = torch::full({1}, 4.0, torch::TensorOptions().device(device));
  const int64_t n = train.x.size(0);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    auto perm = torch::randperm(n);
    for (int64_t i = 0; i < n; i += 256) {
      auto idx = perm.slice(0, i, std::min(i + 256, n));
      auto x = train.x.index_select(0, idx).to(device);
      auto y = train.defaulted.index_select(0, idx).to(device);
      opt.zero_grad();
      // OK(torch-eval-mode-missing): the candidates are fresh, in training mode.
      auto loss = F::binary_cross_entropy_with_logits(
          net->forward(x), y, F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(pos_weight));
      loss.backward();
      opt.step();
    }
    if (epoch >= epochs - 4) {
      credit::Snapshot snap;
      for (const auto &p : net->parameters())
        snap.push_back(p.detach().clone());
      snapshots.push_back(std::move(snap));
    }
  }
}

// Uniform average of the snapshots, loaded into a fresh network of the same shape.
ScorecardNet average_checkpoints(const std::vector<credit::Snapshot> &snapshots, const credit::NetConfig &cfg,
                                 const torch::Device &device) {
  ScorecardNet avg(cfg);
  avg->to(device);
  torch::NoGradGuard no_grad;
  auto params = avg->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    auto sum = torch::zeros_like(params[i]);
    for (const auto &snap : snapshots)
      // OK(torch-loss-accumulation-graph): detached weight copies, under the guard.
      sum += snap[i];
    params[i].copy_(sum / static_cast<double>(snapshots.size()));
  }
  return avg;
}

// Adapts to the latest quarter with micro-batches of 64, four per update.
void fine_tune(ScorecardNet &net, const Applications &recent, const torch::Device &device) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-4));
  opt.zero_grad();
  constexpr int64_t kMicro = 64, kAccum = 4;
  int64_t micro_steps = 0;
  for (int64_t i = 0; i + kMicro <= recent.x.size(0); i += kMicro) {
    auto x = recent.x.slice(0, i, i + kMicro).to(device);
    auto y = recent.defaulted.slice(0, i, i + kMicro).to(device);
    // BUG(torch-eval-mode-missing): the validation loop in main() switched
    // every candidate to eval(); the champion is fine-tuned with dropout off.
    auto loss = F::binary_cross_entropy_with_logits(net->forward(x), y);
    // BUG(torch-grad-accumulation-unscaled): four mean losses are summed into
    // each update without dividing by kAccum: a 4x larger step.
    loss.backward();
    if (++micro_steps % kAccum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}

struct Decisions {
  int64_t approved = 0, referred = 0, declined = 0;
};

// Owns the served model on its device, in evaluation mode.
class ScoringEngine {
 public:
  ScoringEngine(ScorecardNet net, torch::Device device) : net_(std::move(net)), device_(device) {
    net_->to(device_);
    net_->eval();
  }
  virtual ~ScoringEngine() = default;

 protected:
  ScorecardNet net_;
  torch::Device device_;
};

class BatchRiskEngine : public ScoringEngine {
 public:
  using ScoringEngine::ScoringEngine;

  Decisions decide(const torch::Tensor &applications, int64_t chunk) {
    Decisions d;
    for (int64_t i = 0; i < applications.size(0); i += chunk) {
      // OK(torch-eval-mode-missing, torch-device-mismatch): the inherited constructor moved net_ to device_ and called eval().
      // BUG(torch-inference-without-no-grad): the nightly file is scored
      // chunk by chunk with autograd recording every chunk's activations.
      auto pd = torch::sigmoid(net_->forward(applications.slice(0, i, i + chunk).to(device_))).squeeze(1);
      d.approved += pd.lt(0.05).sum().item<int64_t>();
      d.declined += pd.gt(0.30).sum().item<int64_t>();
      d.referred += (pd.ge(0.05) & pd.le(0.30)).sum().item<int64_t>();
    }
    return d;
  }
};

int main() {
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  const Applications train = credit::synth(20000, 1), val = credit::synth(4000, 2);
  const Applications recent = credit::synth(2048, 3), nightly = credit::synth(6000, 4);

  std::array<ScorecardNet, 3> candidates{ScorecardNet(credit::kGrid[0]), ScorecardNet(credit::kGrid[1]),
                                         ScorecardNet(credit::kGrid[2])};
  std::array<std::vector<credit::Snapshot>, 3> snapshots;
  for (size_t k = 0; k < candidates.size(); ++k) {
    candidates[k]->to(device);
    train_with_snapshots(candidates[k], train, device, 8, snapshots[k]);
  }

  std::vector<double> val_auc;
  for (auto &net : candidates) {
    net->eval();
    val_auc.push_back(auc(make_predictor(net), val, device));
  }
  const auto best = static_cast<size_t>(std::max_element(val_auc.begin(), val_auc.end()) - val_auc.begin());
  std::cout << "champion: hidden " << credit::kGrid[best].hidden << ", val AUC " << val_auc[best] << '\n';

  ScorecardNet swa = average_checkpoints(snapshots[best], credit::kGrid[best], device);
  std::cout << "SWA of the champion's last 4 epochs, val AUC " << auc(make_predictor(swa), val, device) << '\n';

  ScorecardNet champion = candidates[best];
  fine_tune(champion, recent, device);
  torch::save(champion, "credit_champion.pt");

  ScorecardNet served(credit::kGrid[best]);
  torch::load(served, "credit_champion.pt");
  BatchRiskEngine engine(served, device);
  const Decisions d = engine.decide(nightly.x, 1024);
  std::cout << "nightly: " << d.approved << " approved, " << d.referred << " referred, " << d.declined
            << " declined\n";
}
