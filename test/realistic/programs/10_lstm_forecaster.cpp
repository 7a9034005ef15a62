// Univariate time-series forecasting with an LSTM: sliding windows, an epoch
// function returning a summary, a step timer, and autoregressive forecasting.
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

struct ForecastConfig {
  int64_t window = 48;
  int64_t batch = 64;
  int64_t hidden = 64;
  int64_t epochs = 10;
  int64_t horizon = 24;
};

struct EpochSummary {
  torch::Tensor total;
  int64_t steps = 0;
  double seconds = 0;
};

class StepTimer {
 public:
  StepTimer() : last_(std::chrono::steady_clock::now()) {}
  double lap() {
    // BUG(torch-host-sync-in-loop): train_epoch() calls lap() after every
    // training step, so the device is drained once per step.
    torch::cuda::synchronize();
    auto now = std::chrono::steady_clock::now();
    double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point last_;
};

struct ForecasterImpl : torch::nn::Module {
  explicit ForecasterImpl(int64_t hidden)
      : lstm(register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(1, hidden).batch_first(true)))),
        head(register_module("head", torch::nn::Linear(hidden, 1))) {}
  torch::Tensor forward(torch::Tensor x) {
    auto out = std::get<0>(lstm->forward(x));
    return head(out.select(1, out.size(1) - 1));
  }
  torch::nn::LSTM lstm;
  torch::nn::Linear head;
};
TORCH_MODULE(Forecaster);

torch::Tensor make_series(int64_t n) {
  auto t = torch::arange(n, torch::kFloat);
  return torch::sin(t * 0.1) + 0.1 * torch::randn({n});
}

EpochSummary train_epoch(Forecaster &model, torch::optim::Optimizer &opt, const torch::Tensor &series,
                         const ForecastConfig &cfg, torch::Device device) {
  EpochSummary summary{torch::zeros({}, device)};
  StepTimer timer;
  auto windows = series.unfold(0, cfg.window + 1, 1);  // [N, window + 1]
  for (int64_t start = 0; start + cfg.batch <= windows.size(0); start += cfg.batch) {
    auto chunk = windows.narrow(0, start, cfg.batch).to(device);
    auto x = chunk.narrow(1, 0, cfg.window).unsqueeze(-1);
    auto y = chunk.narrow(1, cfg.window, 1);
    auto loss = torch::smooth_l1_loss(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): the summary leaves the function,
    // but backward() runs in this loop: every step's graph is kept.
    summary.total = summary.total + loss;
    ++summary.steps;
    summary.seconds += timer.lap();
  }
  return summary;
}

std::vector<float> forecast(Forecaster &model, const torch::Tensor &history, const ForecastConfig &cfg,
                            torch::Device device) {
  model->eval();
  auto window = history.narrow(0, history.size(0) - cfg.window, cfg.window).to(device).view({1, cfg.window, 1});
  std::vector<float> out;
  for (int64_t h = 0; h < cfg.horizon; ++h) {
    // BUG(torch-inference-without-no-grad): an autoregressive rollout that
    // never calls backward(), without a NoGradGuard.
    auto next = model->forward(window);
    out.push_back(next.item<float>());
    window = torch::cat({window.narrow(1, 1, cfg.window - 1), next.view({1, 1, 1})}, 1);
  }
  return out;
}

int main() {
  ForecastConfig cfg;
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Forecaster model(cfg.hidden);
  model->to(device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  auto series = make_series(5000);
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    model->train();
    auto summary = train_epoch(model, opt, series, cfg, device);
    std::cout << "epoch " << epoch << " loss " << (summary.total / summary.steps).item<double>()
              << " (" << summary.seconds << " s)\n";
  }
  for (float v : forecast(model, series, cfg, device))
    std::cout << v << ' ';
  std::cout << '\n';
  return 0;
}
