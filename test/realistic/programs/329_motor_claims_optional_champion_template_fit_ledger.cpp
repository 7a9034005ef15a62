// Motor insurance pricing: claim frequency is a Poisson rate per policy-year
// (a log-linear net with a region embedding and the log exposure as offset);
// claim severity is the log amount of each reported claim, fitted with a Huber
// loss by a deeper net with batch norm and dropout. Each quarter a challenger
// severity model is trained on the newest claims and compared with the
// champion of the previous quarter before the rating tables are refreshed.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kNumeric = 9, kRegions = 22;

struct PolicyBatch {
  torch::Tensor numeric, region, log_exposure, claims;  // [B, 9], [B] long, [B], [B]
};
struct ClaimBatch {
  torch::Tensor numeric, region, log_amount;  // [B, 9], [B] long, [B]
};

// Log-linear frequency model: embedding and linear layers only.
struct FrequencyNetImpl : nn::Module {
  FrequencyNetImpl()
      : region(register_module("region", nn::Embedding(kRegions, 4))),
        linear(register_module("linear", nn::Linear(kNumeric + 4, 1))) {}
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& r) {
    return linear(torch::cat({x, region(r)}, 1)).squeeze(1);
  }
  nn::Embedding region;
  nn::Linear linear;
};
TORCH_MODULE(FrequencyNet);

struct SeverityNetImpl : nn::Module {
  SeverityNetImpl(int64_t hidden, double dropout)
      : region(register_module("region", nn::Embedding(kRegions, 8))),
        body(register_module("body", nn::Sequential(nn::Linear(kNumeric + 8, hidden), nn::BatchNorm1d(hidden),
                                                    nn::ReLU(), nn::Dropout(dropout), nn::Linear(hidden, 1)))) {}
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& r) {
    return body->forward(torch::cat({x, region(r)}, 1)).squeeze(1);
  }
  nn::Embedding region;
  nn::Sequential body;
};
TORCH_MODULE(SeverityNet);

class SeverityNetBuilder {
 public:
  SeverityNetBuilder& hidden(int64_t h) { hidden_ = h; return *this; }
  SeverityNetBuilder& dropout(double p) { dropout_ = p; return *this; }
  SeverityNet build(const torch::Device& device) const {
    SeverityNet net(hidden_, dropout_);
    // OK(torch-tensor-to-discarded): Module::to moves the parameters in place.
    net->to(device);
    return net;
  }

 private:
  int64_t hidden_ = 64;
  double dropout_ = 0.1;
};

struct FitConfig {
  int accum = 4;
  double lr = 1e-3;
};

struct HuberLogAmount {
  double delta = 1.0;
  torch::Tensor operator()(const torch::Tensor& pred, const torch::Tensor& log_amount) const {
    return F::huber_loss(pred, log_amount, F::HuberLossFuncOptions().delta(delta));
  }
};

// Keeps every batch loss of a run for the pricing committee's learning curves.
struct LossLedger {
  std::vector<torch::Tensor> batches;
  void record(const torch::Tensor& loss) {
    // BUG(torch-loss-accumulation-graph): the batch loss is kept with its graph for the whole run.
    batches.push_back(loss);
  }
};

void add_detached(torch::Tensor& total, const torch::Tensor& loss) {
  // OK(torch-loss-accumulation-graph): detached before it is summed.
  total += loss.detach();
}

template <typename Net, typename Criterion>
void fit_accumulated(Net& net, const std::vector<ClaimBatch>& data, Criterion criterion, const FitConfig& cfg,
                     LossLedger& ledger) {
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(cfg.lr));
  net->train();
  opt.zero_grad();
  int micro = 0;
  for (const auto& b : data) {
    auto loss = criterion(net->forward(b.numeric, b.region), b.log_amount);
    // BUG(torch-grad-accumulation-unscaled): the Huber loss is a batch mean; cfg.accum of them add up per step.
    loss.backward();
    ledger.record(loss);
    if (++micro % cfg.accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}

void zero_grads(FrequencyNet& net) {
  for (auto& p : net->parameters())
    if (p.grad().defined()) p.grad().zero_();
}

torch::Tensor fit_frequency(FrequencyNet& net, const std::vector<PolicyBatch>& data, int64_t k, double base_rate) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-2));
  net->train();
  zero_grads(net);
  auto total = torch::zeros({}, data.front().claims.options());
  auto base = torch::tensor(std::log(base_rate));
  for (size_t i = 0; i < data.size(); ++i) {
    const auto& b = data[i];
    // OK(torch-device-mismatch): `base` is a 0-dim CPU scalar, which LibTorch adds to a tensor on any device.
    auto log_rate = net->forward(b.numeric, b.region) + b.log_exposure + base;
    auto loss = F::poisson_nll_loss(log_rate, b.claims) / static_cast<double>(k);
    // OK(torch-grad-accumulation-unscaled): the Poisson mean is divided by k before backward().
    loss.backward();
    add_detached(total, loss);
    if ((i + 1) % k == 0) {
      // OK(torch-missing-zero-grad): zero_grads() resets every parameter's gradient under the same condition.
      opt.step();
      zero_grads(net);
    }
  }
  return total;
}

// Telematics pilot: tiny batches, one step each, skipping the ones whose gradient blew up.
void fine_tune_frequency(FrequencyNet& net, const std::vector<PolicyBatch>& pilot) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(1e-3));
  net->train();
  for (const auto& b : pilot) {
    opt.zero_grad();
    auto loss = F::poisson_nll_loss(net->forward(b.numeric, b.region) + b.log_exposure, b.claims);
    // OK(torch-grad-accumulation-unscaled): every iteration either steps or resets; nothing accumulates.
    loss.backward();
    double norm = nn::utils::clip_grad_norm_(net->parameters(), 5.0);
    if (!std::isfinite(norm)) continue;
    // OK(torch-missing-zero-grad): zero_grad() opens every iteration, the skipped ones included.
    opt.step();
  }
}

torch::Device pick_device() {
  if (!torch::cuda::is_available()) return torch::Device(torch::kCPU);
  // OK(torch-cuda-unguarded): reached only after the availability check returned.
  return torch::Device(torch::kCUDA);
}

template <typename Batch>
std::vector<Batch> synth(int n_batches, int64_t n, const torch::Device& d);

template <>
std::vector<PolicyBatch> synth(int n_batches, int64_t n, const torch::Device& d) {
  std::vector<PolicyBatch> out;
  auto lopt = torch::TensorOptions().dtype(torch::kLong).device(d);
  for (int i = 0; i < n_batches; ++i)
    out.push_back({torch::randn({n, kNumeric}, d), torch::randint(0, kRegions, {n}, lopt),
                   torch::log(torch::rand({n}, d).clamp_min(0.05)), torch::poisson(torch::full({n}, 0.07, d))});
  return out;
}

template <>
std::vector<ClaimBatch> synth(int n_batches, int64_t n, const torch::Device& d) {
  std::vector<ClaimBatch> out;
  auto lopt = torch::TensorOptions().dtype(torch::kLong).device(d);
  for (int i = 0; i < n_batches; ++i)
    out.push_back({torch::randn({n, kNumeric}, d), torch::randint(0, kRegions, {n}, lopt),
                   7.5 + torch::randn({n}, d)});
  return out;
}

int main() {
  torch::manual_seed(329);
  torch::Device device = pick_device();
  FitConfig cfg;
  SeverityNetBuilder builder;
  builder.hidden(96).dropout(0.2);

  std::optional<SeverityNet> champion;
  champion.emplace(builder.build(device));
  LossLedger ledger;
  fit_accumulated(*champion, synth<ClaimBatch>(30, 128, device), HuberLogAmount{}, cfg, ledger);

  SeverityNet challenger = builder.build(device);
  fit_accumulated(challenger, synth<ClaimBatch>(30, 128, device), HuberLogAmount{1.5}, cfg, ledger);

  FrequencyNet frequency;
  frequency->to(device);
  auto freq_total = fit_frequency(frequency, synth<PolicyBatch>(40, 512, device), 4, 0.07);
  fine_tune_frequency(frequency, synth<PolicyBatch>(10, 16, device));

  auto holdout = synth<ClaimBatch>(5, 256, device);
  auto policies = synth<PolicyBatch>(5, 1024, device);
  challenger->eval();
  torch::NoGradGuard no_grad;
  auto champ_err = torch::zeros({}, device), chall_err = torch::zeros({}, device);
  for (const auto& b : holdout) {
    // BUG(torch-eval-mode-missing): the champion in the std::optional still has dropout and batch statistics on.
    champ_err += ((*champion)->forward(b.numeric, b.region) - b.log_amount).abs().mean();
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad, torch-loss-accumulation-graph): eval() above;
    // the guard covers the loop, so the sum holds no graph.
    chall_err += (challenger->forward(b.numeric, b.region) - b.log_amount).abs().mean();
  }
  auto expected = torch::zeros({}, device), observed = torch::zeros({}, device);
  for (const auto& p : policies) {
    // OK(torch-eval-mode-missing): the frequency net has no dropout and no batch norm.
    expected += torch::exp(frequency->forward(p.numeric, p.region) + p.log_exposure).sum();
    observed += p.claims.sum();
  }
  std::vector<std::pair<std::string, torch::Tensor>> report = {
      {"frequency train loss", freq_total}, {"A/E ratio", observed / expected},
      {"champion MAE (log)", champ_err / 5}, {"challenger MAE (log)", chall_err / 5}};
  for (const auto& [name, value] : report)
    // OK(torch-host-sync-in-loop): a fixed list of metrics printed once training is over.
    std::cout << name << ": " << value.item<double>() << '\n';
  std::cout << "ledger holds " << ledger.batches.size() << " batch losses\n";
}
