// Day-ahead power-load forecasting for a regional grid: 168 hourly lags and
// 12 calendar features predict the next 24 hours. Hyper-parameters are
// checked by blocked k-fold cross-validation; every fold builds a fresh model
// from a factory, the fold models form an ensemble, and the champion fold is
// reloaded from its checkpoint and adapted to the most recent weeks before a
// walk-forward backtest.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace grid {

constexpr int64_t kLags = 168, kCalendar = 12, kHorizon = 24;

struct Window {
  torch::Tensor lags;      // [B, 168], load normalised by the regional peak
  torch::Tensor calendar;  // [B, 12]
  torch::Tensor target;    // [B, 24]
};

std::vector<Window> synth_windows(int64_t batches, int64_t batch_size, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<Window> out;
  for (int64_t i = 0; i < batches; ++i) {
    auto base = 0.6 + 0.3 * torch::rand({batch_size, 1}, gen);
    auto phase = torch::arange(kLags + kHorizon, torch::kFloat) * (2 * M_PI / 24.0);
    auto series = base + 0.2 * torch::sin(phase).unsqueeze(0) + 0.02 * torch::randn({batch_size, kLags + kHorizon}, gen);
    out.push_back({series.narrow(1, 0, kLags).contiguous(), torch::rand({batch_size, kCalendar}, gen),
                   series.narrow(1, kLags, kHorizon).contiguous()});
  }
  return out;
}

struct HParams {
  int64_t hidden = 256;
  double dropout = 0.1;
  double lr = 1e-3;
  int epochs = 6;
};

struct LoadNetImpl : nn::Module {
  explicit LoadNetImpl(const HParams &hp)
      : lag_proj(register_module("lag_proj", nn::Linear(kLags, hp.hidden))),
        cal_proj(register_module("cal_proj", nn::Linear(kCalendar, hp.hidden))),
        norm(register_module("norm", nn::BatchNorm1d(hp.hidden))),
        drop(register_module("drop", nn::Dropout(hp.dropout))),
        head(register_module("head", nn::Linear(hp.hidden, kHorizon))) {}

  torch::Tensor forward(const torch::Tensor &lags, const torch::Tensor &calendar) {
    auto h = torch::gelu(norm->forward(lag_proj->forward(lags) + cal_proj->forward(calendar)));
    return head->forward(drop->forward(h));
  }

  nn::Linear lag_proj, cal_proj;
  nn::BatchNorm1d norm;
  nn::Dropout drop;
  nn::Linear head;
};
TORCH_MODULE(LoadNet);

LoadNet make_model(const HParams &hp, const torch::Device &device) {
  LoadNet net(hp);
  net->to(device);
  return net;
}

// Mean absolute percentage error over some windows.
double mape(LoadNet &net, const std::vector<Window> &windows, const torch::Device &device) {
  torch::NoGradGuard no_grad;
  auto err = torch::zeros({}, torch::TensorOptions().device(device));
  int64_t n = 0;
  for (const auto &w : windows) {
    // BUG(torch-eval-mode-missing): run_fold() scores each fold's model straight
    // after training, still in training mode (main()'s report calls eval() first).
    auto pred = net->forward(w.lags.to(device), w.calendar.to(device));
    auto y = w.target.to(device);
    err += ((pred - y).abs() / y.abs().clamp_min(1e-3)).sum();
    n += y.numel();
  }
  return err.item<double>() / std::max<int64_t>(n, 1) * 100.0;
}

struct FoldResult {
  LoadNet model{nullptr};
  double val_mape = 0.0;
  std::vector<torch::Tensor> curve;
};

FoldResult run_fold(const std::vector<Window> &data, int fold, int folds, const HParams &hp,
                    const torch::Device &device) {
  const size_t block = data.size() / folds;
  std::vector<Window> train, val;
  for (size_t i = 0; i < data.size(); ++i)
    (i / block == static_cast<size_t>(fold) ? val : train).push_back(data[i]);

  FoldResult r;
  r.model = make_model(hp, device);
  torch::optim::Adam opt(r.model->parameters(), torch::optim::AdamOptions(hp.lr));
  for (int epoch = 0; epoch < hp.epochs; ++epoch) {
    for (const auto &w : train) {
      opt.zero_grad();
      // OK(torch-eval-mode-missing): each fold's model is fresh from make_model(), in training mode.
      auto pred = r.model->forward(w.lags.to(device), w.calendar.to(device));
      auto loss = F::smooth_l1_loss(pred, w.target.to(device));
      // BUG(torch-host-sync-in-loop): the divergence check reads the loss back
      // from the device on every step.
      if (!std::isfinite(loss.item<double>()))
        throw std::runtime_error("fold " + std::to_string(fold) + " diverged");
      loss.backward();
      opt.step();
      // BUG(torch-loss-accumulation-graph): the learning curve keeps every
      // step's whole autograd graph alive.
      r.curve.push_back(loss);
    }
  }
  r.val_mape = mape(r.model, val, device);
  return r;
}

// The production copy of a fold: reloaded from its checkpoint, ready to serve.
LoadNet load_champion(const std::string &path, const HParams &hp, const torch::Device &device) {
  LoadNet net = make_model(hp, device);
  torch::load(net, path, device);
  net->eval();
  return net;
}

// Adapts the champion to the most recent weeks with a small learning rate.
void adapt(LoadNet &net, const std::vector<Window> &recent, const torch::Device &device, double lr) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
  for (const auto &w : recent) {
    opt.zero_grad();
    // BUG(torch-eval-mode-missing): load_champion() returns the model in eval
    // mode and nothing calls train(): the adaptation runs with dropout off and
    // frozen batch-norm statistics.
    auto pred = net->forward(w.lags.to(device), w.calendar.to(device));
    auto loss = F::l1_loss(pred, w.target.to(device));
    loss.backward();
    opt.step();
  }
}

// Walk-forward backtest: each day is forecast from the previous week.
template <class Model>
std::vector<double> backtest(Model &model, const std::vector<Window> &days, const torch::Device &device) {
  std::vector<double> daily_mae;
  model->eval();
  for (const auto &d : days) {
    // BUG(torch-inference-without-no-grad): no guard: autograd records every
    // day's forecast.
    // OK(torch-eval-mode-missing): eval() above.
    torch::Tensor pred = model->forward(d.lags.to(device), d.calendar.to(device));
    daily_mae.push_back((pred - d.target.to(device)).abs().mean().item<double>());
  }
  return daily_mae;
}

}  // namespace grid

using namespace grid;

int main() {
  torch::manual_seed(286);
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  auto history = synth_windows(100, 64, 1), recent = synth_windows(8, 64, 2), holdout = synth_windows(10, 64, 3);
  const HParams hp;
  const int folds = 5;

  std::vector<std::pair<std::string, LoadNet>> zoo;
  double best = std::numeric_limits<double>::infinity();
  std::string best_path;
  for (int k = 0; k < folds; ++k) {
    FoldResult r = run_fold(history, k, folds, hp, device);
    std::cout << "fold " << k << " val MAPE " << r.val_mape << "% over " << r.curve.size() << " steps\n";
    const std::string path = "load_fold" + std::to_string(k) + ".pt";
    torch::save(r.model, path);
    if (r.val_mape < best) {
      best = r.val_mape;
      best_path = path;
    }
    zoo.emplace_back("fold" + std::to_string(k), r.model);
  }

  // Ensemble forecast on the hold-out weeks: the mean of the fold models.
  {
    torch::NoGradGuard no_grad;
    auto abs_err = torch::zeros({}, torch::TensorOptions().device(device));
    for (const auto &w : holdout) {
      std::vector<torch::Tensor> preds;
      for (auto &[name, model] : zoo) {
        // BUG(torch-eval-mode-missing): the fold models come out of run_fold()
        // in training mode and nothing here calls eval().
        preds.push_back(model->forward(w.lags.to(device), w.calendar.to(device)));
      }
      abs_err += (torch::stack(preds).mean(0) - w.target.to(device)).abs().mean();
    }
    std::cout << "ensemble MAE " << abs_err.item<double>() / holdout.size() << '\n';
  }

  for (auto &entry : zoo) {
    entry.second->eval();
    std::cout << entry.first << " holdout MAPE " << mape(entry.second, holdout, device) << "%\n";
  }

  LoadNet champion = load_champion(best_path, hp, device);
  std::cout << "champion holdout MAPE " << mape(champion, holdout, device) << "%\n";
  adapt(champion, recent, device, 1e-4);
  auto maes = backtest(champion, holdout, device);
  std::cout << "adapted backtest MAE, first day " << maes.front() << ", last day " << maes.back() << '\n';
  return 0;
}
