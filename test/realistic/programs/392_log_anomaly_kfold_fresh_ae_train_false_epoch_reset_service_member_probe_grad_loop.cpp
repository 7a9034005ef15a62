// Log anomaly detection for a payments API gateway. Each 60-second window of
// gateway logs is parsed (Drain-style) into counts over 128 log templates plus
// 8 latency quantiles; a dropout-regularised autoencoder learns normal
// traffic, and a window whose reconstruction error exceeds the threshold
// calibrated on a clean week pages the on-call. The architecture is checked
// by k-fold cross-validation (a fresh model per fold), refit on all windows,
// topped up on yesterday's traffic and put behind the alerting service. A
// linear probe over the same features names the incident kinds the SRE team
// already labelled. LibTorch 1.13 and 2.x.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kTemplates = 128;
constexpr int64_t kFeatures = kTemplates + 8;
constexpr int64_t kIncidentKinds = 4;

struct DetectorConfig {
  int64_t hidden = 64, bottleneck = 12;
  double dropout = 0.2, lr = 1e-3;
  int64_t batch = 32, accum = 4, folds = 4, epochs = 3;
  double quantile = 0.995;
};

struct WindowAEImpl : nn::Module {
  explicit WindowAEImpl(const DetectorConfig& cfg)
      : enc(register_module("enc", nn::Sequential(nn::Linear(kFeatures, cfg.hidden), nn::ReLU(), nn::Dropout(cfg.dropout),
                                                   nn::Linear(cfg.hidden, cfg.bottleneck)))),
        dec(register_module("dec", nn::Sequential(nn::Linear(cfg.bottleneck, cfg.hidden), nn::ReLU(),
                                                   nn::Linear(cfg.hidden, kFeatures)))) {}
  torch::Tensor forward(const torch::Tensor& x) { return dec->forward(enc->forward(x)); }
  nn::Sequential enc, dec;
};
TORCH_MODULE(WindowAE);

// Multinomial logistic regression: no dropout, no normalisation.
struct TemplateProbeImpl : nn::Module {
  TemplateProbeImpl() : head(register_module("head", nn::Linear(kFeatures, kIncidentKinds))) {}
  torch::Tensor forward(const torch::Tensor& x) { return head->forward(x); }
  nn::Linear head;
};
TORCH_MODULE(TemplateProbe);

// log1p of the template counts, standardised latency quantiles.
torch::Tensor synth_windows(int64_t n, torch::Device device) {
  auto counts = torch::poisson(torch::full({n, kTemplates}, 3.0)).log1p();
  return torch::cat({counts, torch::randn({n, 8})}, 1).to(device);
}

// Micro-batches of cfg.batch windows, one update per cfg.accum of them.
void train_fold(WindowAE& model, torch::optim::Optimizer& opt, const torch::Tensor& x, const DetectorConfig& cfg) {
  model->train();
  const auto chunks = x.split(cfg.batch);
  const auto n = static_cast<int64_t>(chunks.size());
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    for (int64_t i = 0; i < n; ++i) {
      const auto& c = chunks[static_cast<size_t>(i)];
      auto loss = torch::mse_loss(model->forward(c), c) / static_cast<double>(cfg.accum);
      // OK(torch-grad-accumulation-unscaled): divided by the accumulation count.
      loss.backward();
      if ((i + 1) % cfg.accum == 0 || i + 1 == n) {
        // OK(torch-missing-zero-grad): accumulation done right; the reset
        // follows the step under the same condition, and the last chunk of
        // every epoch flushes.
        opt.step();
        opt.zero_grad();
      }
    }
  }
}

// Mean squared reconstruction error of each window.
torch::Tensor window_errors(WindowAE& model, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): both callers switch the model out of
  // training first (train(false) per fold, eval() before calibration).
  auto recon = model->forward(x);
  return (recon - x).pow(2).mean(1);
}

std::vector<double> cross_validate(const torch::Tensor& windows, const DetectorConfig& cfg, torch::Device device) {
  std::vector<double> fold_mse;
  const int64_t n = windows.size(0), fold_size = n / cfg.folds;
  for (int64_t fold = 0; fold < cfg.folds; ++fold) {
    const int64_t lo = fold * fold_size, hi = lo + fold_size;
    auto hold = windows.narrow(0, lo, fold_size);
    auto fit = torch::cat({windows.narrow(0, 0, lo), windows.narrow(0, hi, n - hi)});
    WindowAE model(cfg);
    model->to(device);
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(cfg.lr));
    train_fold(model, opt, fit, cfg);
    model->train(false);
    // OK(torch-host-sync-in-loop): one read per fold; the loop that trains
    // is the batch loop inside train_fold().
    fold_mse.push_back(window_errors(model, hold).mean().item<double>());
  }
  return fold_mse;
}

struct EpochState {
  int64_t epoch = 0, batches = 0;
  torch::Tensor loss_sum;
};

// Clears the optimizer and the running loss at each epoch boundary.
void begin_epoch(torch::optim::Optimizer& opt, EpochState& st, torch::Device device) {
  opt.zero_grad();
  st.loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
  st.batches = 0;
}

void fit_full(WindowAE& model, torch::optim::Optimizer& opt, const torch::Tensor& windows, const DetectorConfig& cfg,
              torch::Device device) {
  model->train();
  EpochState st;
  for (st.epoch = 0; st.epoch < cfg.epochs; ++st.epoch) {
    begin_epoch(opt, st, device);
    auto perm = torch::randperm(windows.size(0), torch::TensorOptions().dtype(torch::kLong).device(device));
    for (const auto& idx : perm.split(cfg.batch)) {
      auto x = windows.index_select(0, idx);
      auto loss = torch::mse_loss(model->forward(x), x);
      loss.backward();
      // BUG(torch-missing-zero-grad): begin_epoch() is the only reset, once
      // per epoch; every later batch steps with the epoch's summed gradients.
      opt.step();
      // OK(torch-loss-accumulation-graph): detached.
      st.loss_sum += loss.detach();
      ++st.batches;
    }
    // OK(torch-host-sync-in-loop): once per epoch, outside the batch loop.
    std::cout << "refit epoch " << st.epoch << " mse " << (st.loss_sum / st.batches).item<double>() << '\n';
  }
}

// Yesterday's windows, a few passes; the module clears its gradients after
// each update.
void top_up(WindowAE& model, torch::optim::Optimizer& opt, const torch::Tensor& recent, int64_t passes) {
  model->train();
  opt.zero_grad();  // fit_full() leaves its last batch's gradients behind
  for (int64_t p = 0; p < passes; ++p) {
    for (const auto& x : recent.split(64)) {
      auto loss = torch::mse_loss(model->forward(x), x);
      loss.backward();
      // OK(torch-missing-zero-grad): model->zero_grad() right after the step
      // clears what the next backward would add to.
      opt.step();
      model->zero_grad();
    }
  }
}

void fit_probe(TemplateProbe& probe, const torch::Tensor& x, const torch::Tensor& y, int64_t steps) {
  torch::optim::SGD opt(probe->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int64_t s = 0; s < steps; ++s) {
    for (auto& p : probe->parameters())
      if (p.grad().defined()) p.grad().zero_();
    auto loss = F::cross_entropy(probe->forward(x), y);
    loss.backward();
    // OK(torch-missing-zero-grad): the parameter loop zeroes every gradient
    // that exists before the backward; an undefined one carries nothing.
    opt.step();
  }
}

double probe_accuracy(TemplateProbe& probe, const torch::Tensor& x, const torch::Tensor& y) {
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): a single Linear; training and evaluation
  // mode compute the same thing.
  auto pred = probe->forward(x).argmax(1);
  return pred.eq(y).to(torch::kFloat).mean().item<double>();
}

class AnomalyService {
 public:
  AnomalyService(WindowAE model, double threshold) : model_(std::move(model)), threshold_(threshold) {}

  // Indices of the windows to page on.
  std::vector<int64_t> score(const torch::Tensor& stream) {
    torch::NoGradGuard no_grad;
    std::vector<int64_t> alerts;
    for (int64_t start = 0; start < stream.size(0); start += 60) {
      auto chunk = stream.narrow(0, start, std::min<int64_t>(60, stream.size(0) - start));
      // BUG(torch-eval-mode-missing): main() hands over the detector straight
      // from top_up(), which left it in training mode; dropout is on.
      auto err = (model_->forward(chunk) - chunk).pow(2).mean(1);
      auto hits = torch::nonzero(err > threshold_).flatten().cpu();
      for (int64_t k = 0; k < hits.size(0); ++k) alerts.push_back(start + hits[k].item<int64_t>());
    }
    return alerts;
  }

 private:
  WindowAE model_;
  double threshold_;
};

int main() {
  torch::manual_seed(392);
  // OK(torch-cuda-unguarded): guarded selection.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  DetectorConfig cfg;
  auto history = synth_windows(2048, device), clean_week = synth_windows(512, device);
  auto yesterday = synth_windows(256, device), live = synth_windows(600, device);

  auto fold_mse = cross_validate(history, cfg, device);
  for (size_t f = 0; f < fold_mse.size(); ++f) std::cout << "fold " << f << " holdout mse " << fold_mse[f] << '\n';

  WindowAE detector(cfg);
  detector->to(device);
  torch::optim::Adam opt(detector->parameters(), torch::optim::AdamOptions(cfg.lr));
  fit_full(detector, opt, history, cfg, device);
  detector->eval();
  auto clean_err = window_errors(detector, clean_week);
  const double threshold = torch::quantile(clean_err, cfg.quantile).item<double>();

  auto drift_score = [&](const torch::Tensor& x) {
    torch::NoGradGuard no_grad;
    // BUG(torch-eval-mode-missing): called after top_up() below, which
    // switched the captured detector back to training.
    return torch::mse_loss(detector->forward(x), x).item<double>();
  };
  top_up(detector, opt, yesterday, 2);
  std::cout << "threshold " << threshold << ", drift on yesterday " << drift_score(yesterday) << '\n';

  AnomalyService service(detector, threshold);
  auto alerts = service.score(live);
  std::cout << alerts.size() << " windows paged\n";

  TemplateProbe probe;
  probe->to(device);
  auto labelled = synth_windows(400, device);
  auto kinds = torch::randint(0, kIncidentKinds, {400}, torch::TensorOptions().dtype(torch::kLong).device(device));
  fit_probe(probe, labelled, kinds, 200);
  std::cout << "probe accuracy " << probe_accuracy(probe, labelled, kinds) << '\n';
}
