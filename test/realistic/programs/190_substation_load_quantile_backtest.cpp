// Day-ahead load forecasting for distribution substations with quantile
// regression (P10 / P50 / P90 for the next 24 hours, from the last 168 hourly
// readings and calendar features). predict() returns a Forecast struct of
// three tensors by value; the backtest queues the copy of every forecast back
// to the host with to_host_async() and scores the coverage of the bands once
// all substations are done. A small harness measures serving latency, and the
// fine-tuning loop monitors the P10-P90 coverage of each batch.
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kHistory = 168, kCalendar = 8, kHorizon = 24;

struct QuantileNetImpl : torch::nn::Module {
  QuantileNetImpl()
      : trunk(register_module("trunk", torch::nn::Sequential(torch::nn::Linear(kHistory + kCalendar, 256),
                                                             torch::nn::LayerNorm(torch::nn::LayerNormOptions({256})),
                                                             torch::nn::GELU(), torch::nn::Linear(256, 256),
                                                             torch::nn::GELU()))),
        heads(register_module("heads", torch::nn::Linear(256, 3 * kHorizon))) {}

  // [B, kHistory + kCalendar] -> [B, 3, kHorizon], quantiles sorted.
  torch::Tensor forward(const torch::Tensor &x) {
    auto q = heads(trunk->forward(x)).view({-1, 3, kHorizon});
    return std::get<0>(q.sort(1));
  }

  torch::nn::Sequential trunk;
  torch::nn::Linear heads;
};
TORCH_MODULE(QuantileNet);

struct Forecast {
  torch::Tensor p10, p50, p90;
};

Forecast predict(QuantileNet &net, const torch::Tensor &features) {
  auto q = net->forward(features);
  return {q.select(1, 0), q.select(1, 1), q.select(1, 2)};
}

// Starts the copies back to the host; the caller decides when to wait.
Forecast to_host_async(const Forecast &f) {
  return {f.p10.to(torch::kCPU, /*non_blocking=*/true), f.p50.to(torch::kCPU, /*non_blocking=*/true),
          f.p90.to(torch::kCPU, /*non_blocking=*/true)};
}

torch::Tensor pinball(const torch::Tensor &q, const torch::Tensor &y) {
  const auto taus = torch::tensor({0.1, 0.5, 0.9}, q.options()).view({1, 3, 1});
  auto diff = y.unsqueeze(1) - q;
  return torch::max(taus * diff, (taus - 1) * diff).mean();
}

std::pair<torch::Tensor, torch::Tensor> substation_window(int64_t n, torch::Device device) {
  auto x = torch::rand({n, kHistory + kCalendar});
  auto y = x.narrow(1, kHistory - kHorizon, kHorizon) * 0.9 + 0.05 * torch::randn({n, kHorizon});
  return {x.to(device), y.to(device)};
}

void fine_tune(QuantileNet &net, int64_t steps, torch::Device device) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(5e-4));
  std::vector<float> coverage_log;
  for (int64_t step = 0; step < steps; ++step) {
    auto [x, y] = substation_window(128, device);
    auto q = net->forward(x);
    auto loss = pinball(q, y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    auto inside = (y >= q.select(1, 0)).logical_and(y <= q.select(1, 2)).to(torch::kFloat).mean();
    // BUG(torch-host-sync-in-loop): a blocking copy of the batch coverage to
    // the host on every step, only to append it to a log.
    coverage_log.push_back(inside.to(torch::kCPU).item<float>());
    if (step % 100 == 0) {
      // OK(torch-host-sync-in-loop): printed every 100 steps.
      std::cout << "step " << step << " pinball " << loss.item<double>() << "\n";
    }
  }
  std::cout << "last coverage " << coverage_log.back() << "\n";
}

// Fraction of true loads inside the P10-P90 band, over all substations.
double backtest(QuantileNet &net, int64_t substations, torch::Device device) {
  net->eval();
  torch::NoGradGuard no_grad;
  std::vector<Forecast> host;
  std::vector<torch::Tensor> truth;
  for (int64_t s = 0; s < substations; ++s) {
    auto [x, y] = substation_window(32, device);
    // OK(torch-inference-without-no-grad): NoGradGuard above the loop.
    host.push_back(to_host_async(predict(net, x)));
    truth.push_back(y.cpu());
  }
  int64_t inside = 0, total = 0;
  for (size_t i = 0; i < host.size(); ++i) {
    // BUG(torch-non-blocking-d2h-race): the forecasts were only queued for
    // copying; nothing synchronised before the host reads the bands.
    auto lo = host[i].p10.accessor<float, 2>();
    auto hi = host[i].p90.accessor<float, 2>();
    auto y = truth[i].accessor<float, 2>();
    for (int64_t r = 0; r < y.size(0); ++r)
      for (int64_t h = 0; h < kHorizon; ++h, ++total)
        inside += (y[r][h] >= lo[r][h] && y[r][h] <= hi[r][h]) ? 1 : 0;
  }
  return static_cast<double>(inside) / static_cast<double>(total);
}

double serving_latency_ms(QuantileNet &net, int64_t batch, int iters, torch::Device device) {
  net->eval();
  auto x = substation_window(batch, device).first;
  for (int i = 0; i < 10; ++i) {
    // BUG(torch-inference-without-no-grad): the warm-up forwards run before
    // the InferenceMode guard below, with autograd recording.
    net->forward(x);
  }
  c10::InferenceMode guard;
  torch::Tensor q;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    // OK(torch-inference-without-no-grad): under the InferenceMode guard.
    q = net->forward(x);
  }
  auto median = q.select(1, 1).to(torch::kCPU, /*non_blocking=*/true);
  if (device.is_cuda())
    torch::cuda::synchronize();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // OK(torch-non-blocking-d2h-race): synchronised above.
  std::cout << "sample median forecast for hour 0: " << median[0][0].item<float>() << "\n";
  return ms / iters;
}

int main() {
  torch::manual_seed(9);
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  QuantileNet net;
  net->to(device);

  fine_tune(net, 2000, device);
  std::cout << "P10-P90 coverage " << backtest(net, 400, device) << "\n";
  std::cout << "latency " << serving_latency_ms(net, 64, 200, device) << " ms/batch\n";
  return 0;
}
