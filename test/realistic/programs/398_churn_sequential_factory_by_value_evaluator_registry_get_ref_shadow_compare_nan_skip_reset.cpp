// Telecom churn prediction on a 24-column customer table (tenure, contract
// type, monthly charges, support calls, ...). Two MLPs built by one factory
// function, the production "champion" and a lighter-regularised
// "challenger", live in a name-keyed ModelRegistry. Each is trained with a
// ChurnEvaluator on the validation month; the champion's temperature is then
// calibrated, both run in shadow on the test month, the champion produces the
// monthly retention lists and gets a small incremental update on the newest
// month.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace churn {

constexpr int64_t kFeatures = 24;

nn::Sequential make_churn_mlp(int64_t in, double p) {
  return nn::Sequential(nn::Linear(in, 128), nn::BatchNorm1d(128), nn::ReLU(), nn::Dropout(p), nn::Linear(128, 64),
                        nn::BatchNorm1d(64), nn::ReLU(), nn::Dropout(p), nn::Linear(64, 1));
}

struct CustomerTable {
  explicit CustomerTable(int64_t n)
      : features(torch::randn({n, kFeatures})), churned((torch::rand({n}) < 0.2).to(torch::kFloat)) {}
  int64_t size() const { return features.size(0); }
  torch::Tensor x(int64_t i, int64_t bs) const { return features.narrow(0, i, std::min(bs, size() - i)); }
  torch::Tensor y(int64_t i, int64_t bs) const { return churned.narrow(0, i, std::min(bs, size() - i)); }
  torch::Tensor features;  // standardised
  torch::Tensor churned;   // 1.0 when the customer left within 60 days
};

struct Metrics {
  double logloss;
  double precision_at_10;
};

class ChurnEvaluator {
 public:
  ChurnEvaluator(nn::Sequential model, const CustomerTable &table) : model_(std::move(model)), table_(table) {}

  Metrics run() {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> scores;
    for (int64_t i = 0; i < table_.size(); i += 1024) {
      // BUG(torch-eval-mode-missing): main's epoch loop calls run() right after train_epoch() left the model training.
      scores.push_back(torch::sigmoid(model_->forward(table_.x(i, 1024)).squeeze(1)));
    }
    const auto p = torch::cat(scores).clamp(1e-6, 1 - 1e-6);
    const auto logloss = F::binary_cross_entropy(p, table_.churned).item<double>();
    const int64_t k = std::max<int64_t>(1, table_.size() / 10);
    const auto top = std::get<1>(p.topk(k));
    return {logloss, table_.churned.index_select(0, top).mean().item<double>()};
  }

 private:
  nn::Sequential model_;
  const CustomerTable &table_;
};

class ModelRegistry {
 public:
  void put(const std::string &name, nn::Sequential model) { models_.insert_or_assign(name, std::move(model)); }
  nn::Sequential &get(const std::string &name) { return models_.at(name); }

 private:
  std::map<std::string, nn::Sequential> models_;
};

void train_epoch(nn::Sequential &model, torch::optim::Optimizer &opt, const CustomerTable &table,
                 const torch::Tensor &pos_weight) {
  model->train();
  for (int64_t i = 0; i + 256 <= table.size(); i += 256) {
    // OK(torch-eval-mode-missing): train() at the top of every epoch.
    auto logits = model->forward(table.x(i, 256)).squeeze(1);
    auto loss = F::binary_cross_entropy_with_logits(
        logits, table.y(i, 256), F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(pos_weight));
    if (!torch::isfinite(loss).item<bool>()) {  // corrupted rows in the CRM export
      opt.zero_grad();
      continue;
    }
    loss.backward();
    // BUG(torch-missing-zero-grad): gradients are only cleared on the skip path; good batches pile up.
    opt.step();
  }
}

double calibrate_temperature(nn::Sequential &model, const CustomerTable &val) {
  model->eval();
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    // OK(torch-eval-mode-missing): eval() above; the logits are constants for the temperature fit.
    logits = model->forward(val.features).squeeze(1);
  }
  auto log_t = torch::zeros({1}, torch::requires_grad());
  torch::optim::Adam opt({log_t}, torch::optim::AdamOptions(0.01));
  for (int it = 0; it < 200; ++it) {
    opt.zero_grad();
    auto loss = F::binary_cross_entropy_with_logits(logits / log_t.exp(), val.churned);
    loss.backward();
    opt.step();
  }
  return log_t.exp().item<double>();
}

double shadow_compare(ModelRegistry &registry, const CustomerTable &month, double temperature) {
  nn::Sequential &champion = registry.get("champion");
  nn::Sequential &challenger = registry.get("challenger");
  champion->eval();
  torch::NoGradGuard no_grad;
  int64_t agree = 0;
  for (int64_t i = 0; i < month.size(); i += 2048) {
    const auto x = month.x(i, 2048);
    // OK(torch-eval-mode-missing): the champion was switched above.
    const auto a = torch::sigmoid(champion->forward(x) / temperature) > 0.5;
    // BUG(torch-eval-mode-missing): only the champion was switched; the challenger still runs dropout and batch statistics.
    const auto b = torch::sigmoid(challenger->forward(x)) > 0.5;
    agree += a.eq(b).sum().item<int64_t>();
  }
  return static_cast<double>(agree) / static_cast<double>(month.size());
}

std::vector<int64_t> retention_list_sizes(nn::Sequential &model, const std::vector<CustomerTable> &months,
                                          double threshold) {
  model->eval();
  std::vector<int64_t> sizes;
  for (const auto &month : months) {
    // BUG(torch-inference-without-no-grad): eval() does not stop autograd; each month's graph is recorded.
    const auto p = torch::sigmoid(model->forward(month.features)).squeeze(1);
    sizes.push_back((p > threshold).sum().item<int64_t>());
  }
  return sizes;
}

// A few passes over the newest month keep the champion current between full retrains.
void incremental_update(nn::Sequential model, const CustomerTable &recent, int passes) {
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  for (int pass = 0; pass < passes; ++pass) {
    for (int64_t i = 0; i + 256 <= recent.size(); i += 256) {
      opt.zero_grad();
      // BUG(torch-eval-mode-missing): the champion is still in eval mode from scoring; BatchNorm stays frozen while it trains.
      auto logits = model->forward(recent.x(i, 256)).squeeze(1);
      auto loss = F::binary_cross_entropy_with_logits(logits, recent.y(i, 256));
      loss.backward();
      opt.step();
    }
  }
}

}  // namespace churn

int main() {
  using namespace churn;
  torch::manual_seed(398);
  const CustomerTable train(20000), val(4000), test(4000);
  const auto pos_weight = torch::tensor({4.0});  // one churner for four stayers

  ModelRegistry registry;
  registry.put("champion", make_churn_mlp(kFeatures, 0.3));
  registry.put("challenger", make_churn_mlp(kFeatures, 0.1));

  for (const char *name : {"champion", "challenger"}) {
    nn::Sequential &model = registry.get(name);
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3).weight_decay(1e-5));
    ChurnEvaluator val_eval(model, val);
    for (int epoch = 0; epoch < 15; ++epoch) {
      train_epoch(model, opt, train, pos_weight);
      const Metrics m = val_eval.run();
      std::cout << name << " epoch " << epoch << " logloss " << m.logloss << " p@10 " << m.precision_at_10 << '\n';
    }
  }

  const double temperature = calibrate_temperature(registry.get("champion"), val);
  ChurnEvaluator test_eval(registry.get("champion"), test);
  const Metrics tm = test_eval.run();
  std::cout << "champion test logloss " << tm.logloss << " T=" << temperature << '\n';
  std::cout << "shadow agreement " << shadow_compare(registry, test, temperature) << '\n';

  std::vector<CustomerTable> months;
  for (int m = 0; m < 6; ++m) months.emplace_back(50000);
  for (int64_t n : retention_list_sizes(registry.get("champion"), months, 0.6)) std::cout << "retention list " << n << '\n';

  incremental_update(registry.get("champion"), months.back(), 2);
  return 0;
}
