// A multi-step load forecaster for a univariate series (hourly electricity
// demand). The series is cut into overlapping windows (lookback, horizon);
// batches are walked with iterators over the window list and assembled with
// std::transform. An LSTM encoder reads the lookback and a linear head
// predicts the whole horizon. After training, a long autoregressive rollout
// produces the next week, which is written to a CSV for the dashboard.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

constexpr int64_t kLookback = 168;
constexpr int64_t kHorizon = 24;

struct Window {
  torch::Tensor past;    // [kLookback]
  torch::Tensor future;  // [kHorizon]
};

std::vector<Window> make_windows(const torch::Tensor &series, int64_t stride) {
  auto frames = series.unfold(0, kLookback + kHorizon, stride);
  std::vector<Window> out;
  for (int64_t i = 0; i < frames.size(0); ++i)
    out.push_back({frames[i].slice(0, 0, kLookback), frames[i].slice(0, kLookback)});
  return out;
}

torch::Tensor synthetic_series(int64_t hours) {
  std::vector<float> v(hours);
  for (int64_t h = 0; h < hours; ++h)
    v[h] = static_cast<float>(std::sin(2 * M_PI * h / 24.0) + 0.3 * std::sin(2 * M_PI * h / 168.0));
  return torch::from_blob(v.data(), {hours}, torch::kFloat).clone();
}

struct ForecasterImpl : torch::nn::Module {
  ForecasterImpl()
      : lstm(register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(1, 64).num_layers(2).batch_first(true)))),
        head(register_module("head", torch::nn::Linear(64, kHorizon))) {}
  // past [B, kLookback] -> [B, kHorizon]
  torch::Tensor forward(const torch::Tensor &past) {
    auto out = std::get<0>(lstm->forward(past.unsqueeze(-1)));
    return head->forward(out.select(1, -1));
  }
  torch::nn::LSTM lstm;
  torch::nn::Linear head;
};
TORCH_MODULE(Forecaster);

void write_csv(const std::string &path, const torch::Tensor &values) {
  std::ofstream out(path);
  auto v = values.contiguous();
  const float *p = v.data_ptr<float>();
  for (int64_t i = 0; i < v.numel(); ++i)
    out << i << "," << p[i] << "\n";
}

std::optional<double> validate(Forecaster &model, const std::vector<Window> &windows, const torch::Device &device) {
  if (windows.empty())
    return std::nullopt;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> errs;
  for (auto &&w : windows) {
    // OK(torch-inference-without-no-grad): under the guard.
    auto pred = model->forward(w.past.unsqueeze(0).to(device));
    errs.push_back((pred.squeeze(0) - w.future.to(device)).abs().mean());
  }
  auto total = std::accumulate(errs.begin(), errs.end(), torch::zeros({}, device));
  return total.item<double>() / static_cast<double>(errs.size());
}

// Rolls the forecaster forward, feeding each predicted day back in.
torch::Tensor rollout(Forecaster &model, torch::Tensor context, int64_t hours) {
  std::vector<torch::Tensor> produced;
  int64_t done = 0;
  do {
    // BUG(torch-inference-without-no-grad): the rollout never calls
    // backward(), and every step's graph is kept through 'context'.
    auto day = model->forward(context.unsqueeze(0)).squeeze(0);
    produced.push_back(day);
    context = torch::cat({context.slice(0, kHorizon), day});
    done += kHorizon;
  } while (done < hours);
  return torch::cat(produced);
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  auto series = synthetic_series(24 * 365 * 3);
  const int64_t split = 24 * 365 * 2;
  auto train_w = make_windows(series.slice(0, 0, split), 6);
  auto val_w = make_windows(series.slice(0, split), 24);

  Forecaster model;
  model->to(device);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  const int64_t bs = 64;
  for (int epoch = 0; epoch < 20; ++epoch) {
    auto epoch_loss = torch::zeros({}, device);
    int64_t step = 0;
    for (auto it = train_w.cbegin(); std::distance(it, train_w.cend()) >= bs; it += bs, ++step) {
      std::vector<torch::Tensor> pasts(bs), futs(bs);
      std::transform(it, it + bs, pasts.begin(), [](const Window &w) { return w.past; });
      std::transform(it, it + bs, futs.begin(), [](const Window &w) { return w.future; });
      auto past_host = torch::stack(pasts);
      // BUG(torch-non-blocking-pageable): the stacked batch is ordinary
      // pageable memory; the copy runs synchronously anyway.
      auto past = past_host.to(device, /*non_blocking=*/true);
      // OK(torch-non-blocking-pageable): pinned before the copy.
      auto future = torch::stack(futs).pin_memory().to(device, /*non_blocking=*/true);
      opt.zero_grad();
      auto loss = torch::smooth_l1_loss(model->forward(past), future);
      loss.backward();
      opt.step();
      // BUG(torch-loss-accumulation-graph): the epoch total is declared
      // outside the batch loop and keeps every step's graph.
      epoch_loss = loss + epoch_loss;
      if (step % 50 == 0) {
        // OK(torch-host-sync-in-loop): every 50 steps.
        std::cout << "epoch " << epoch << " step " << step << " loss " << loss.item<double>() << "\n";
      }
    }
    if (auto mae = validate(model, val_w, device))
      std::cout << "epoch " << epoch << " val mae " << *mae << "\n";
  }

  auto week = rollout(model, series.slice(0, -kLookback).to(device), 24 * 7);
  auto host = week.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): the CSV writer reads the host buffer
  // before the asynchronous copy is known to have landed.
  write_csv("forecast_week.csv", host);

  auto last_day = week.slice(0, -kHorizon).to(torch::kCPU, /*non_blocking=*/true);
  if (device.is_cuda())
    torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): synchronised first.
  write_csv("forecast_last_day.csv", last_day);
  return 0;
}
