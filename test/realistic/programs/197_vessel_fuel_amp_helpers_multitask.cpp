// Fuel-consumption regression plus main-engine anomaly detection for a
// container-ship fleet: 10-minute windows of engine and voyage signals
// (shaft RPM, speed through water, draft, wind, swell, fuel temperature, ...).
// The shore-side GPU trains in mixed precision through two helpers,
// amp::begin() and amp::end(), and a wrapper that runs a callable between
// them. Static loss scaling by hand: LibTorch has no GradScaler. The ship's
// edge box then keeps adapting the fuel head on live windows.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kSignals = 14, kSteps = 60;
constexpr double kLossScale = 1024.0;

#if TORCH_VERSION_MAJOR >= 2
#define CUDA_AUTOCAST(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#else
#define CUDA_AUTOCAST(on) at::autocast::set_enabled(on)
#endif

namespace amp {
void begin() { CUDA_AUTOCAST(true); }
void end() {
  CUDA_AUTOCAST(false);
  at::autocast::clear_cache();
}
}  // namespace amp

// Runs fn() with CUDA autocast on and switches it off afterwards.
template <class Fn> auto autocast_call(Fn &&fn) {
  amp::begin();
  auto out = fn();
  amp::end();
  return out;
}

struct FuelOutputs {
  torch::Tensor tonnes_per_day, anomaly_logit;
};

struct FuelNetImpl : torch::nn::Module {
  FuelNetImpl()
      : trunk(register_module("trunk", torch::nn::Sequential(torch::nn::Linear(kSignals * kSteps, 256),
                                                             torch::nn::BatchNorm1d(256), torch::nn::GELU(),
                                                             torch::nn::Dropout(0.1), torch::nn::Linear(256, 128),
                                                             torch::nn::GELU()))),
        fuel(register_module("fuel", torch::nn::Linear(128, 1))),
        anomaly(register_module("anomaly", torch::nn::Linear(128, 1))) {}

  FuelOutputs forward(const torch::Tensor &window) {
    auto h = trunk->forward(window.flatten(1));
    return {fuel(h).squeeze(1), anomaly(h).squeeze(1)};
  }

  torch::nn::Sequential trunk;
  torch::nn::Linear fuel, anomaly;
};
TORCH_MODULE(FuelNet);

struct Window {
  torch::Tensor signals, tonnes, is_anomaly;
};

std::vector<Window> synth_windows(int64_t batches, int64_t n, torch::Device device) {
  std::vector<Window> out;
  for (int64_t b = 0; b < batches; ++b) {
    auto signals = torch::randn({n, kSignals, kSteps}, device);
    auto rpm = signals.select(1, 0).mean(1);
    auto tonnes = 40.0 + 6.0 * rpm + 0.5 * torch::randn({n}, device);
    auto anomalous = (torch::rand({n}, device) < 0.05).to(torch::kFloat);
    out.push_back({signals + anomalous.view({n, 1, 1}) * 2.0, tonnes, anomalous});
  }
  return out;
}

torch::Tensor multitask_loss(FuelNet &net, const Window &w) {
  auto out = net->forward(w.signals);
  return torch::mse_loss(out.tonnes_per_day.to(torch::kFloat), w.tonnes) +
         F::binary_cross_entropy_with_logits(out.anomaly_logit.to(torch::kFloat), w.is_anomaly);
}

void unscale_grads(FuelNet &net, double scale) {
  for (auto &p : net->parameters())
    if (p.grad().defined())
      p.grad().div_(scale);
}

void pretrain(FuelNet &net, const std::vector<Window> &fleet_history, int epochs) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(3e-4));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    opt.zero_grad();
    int64_t step = 0;
    for (const auto &w : fleet_history) {
      auto loss = autocast_call([&] { return multitask_loss(net, w); });
      // OK(torch-autocast-region): autocast_call closed the region; the loss is scaled.
      (loss * kLossScale).backward();
      unscale_grads(net, kLossScale);
      // BUG(torch-missing-zero-grad): the gradients are reset once per epoch,
      // so each step applies the sum of every earlier batch of the epoch.
      opt.step();
      if (++step % 50 == 0)
        // OK(torch-host-sync-in-loop): printed every 50 steps.
        std::cout << "epoch " << epoch << " step " << step << " loss " << loss.item<double>() << '\n';
    }
  }
}

// Re-fits the anomaly head on the windows the superintendents labelled.
void finetune_anomaly(FuelNet &net, const std::vector<Window> &labelled) {
  net->train();
  torch::optim::SGD opt(net->anomaly->parameters(), torch::optim::SGDOptions(1e-2).momentum(0.9));
  for (const auto &w : labelled) {
    opt.zero_grad();
    amp::begin();
    auto logit = net->forward(w.signals).anomaly_logit;
    auto loss = F::binary_cross_entropy_with_logits(logit, w.is_anomaly);
    amp::end();
    // BUG(torch-autocast-region): the loss comes from a float16 region and
    // reaches backward() unscaled; rare-anomaly gradients underflow.
    loss.backward();
    opt.step();
  }
}

// One adaptation step on the ship's edge box, per live window.
torch::Tensor online_update(FuelNet &net, torch::optim::SGD &opt, const Window &w) {
  return autocast_call([&] {
    opt.zero_grad();
    auto loss = torch::mse_loss(net->forward(w.signals).tonnes_per_day.to(torch::kFloat), w.tonnes);
    // BUG(torch-autocast-region): the whole step runs inside autocast_call,
    // so backward() runs with autocast still on.
    (loss * kLossScale).backward();
    unscale_grads(net, kLossScale);
    opt.step();
    return loss.detach();
  });
}

// Mean absolute percentage error of the fuel head.
double fuel_mape(FuelNet &net, const std::vector<Window> &test) {
  net->eval();
  torch::NoGradGuard no_grad;
  // BUG(torch-autocast-region): the divergence return below leaves CUDA
  // autocast on for the rest of the thread.
  CUDA_AUTOCAST(true);
  double err = 0.0;
  int64_t n = 0;
  for (const auto &w : test) {
    auto pred = net->forward(w.signals).tonnes_per_day.to(torch::kFloat);
    err += ((pred - w.tonnes).abs() / w.tonnes).sum().item<double>();
    n += w.tonnes.size(0);
  }
  if (!std::isfinite(err)) {
    std::cerr << "fuel head diverged\n";
    return std::numeric_limits<double>::infinity();
  }
  CUDA_AUTOCAST(false);
  net->train();
  return 100.0 * err / static_cast<double>(n);
}

int main() {
  torch::manual_seed(197);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  auto history = synth_windows(200, 64, device);
  auto labelled = synth_windows(20, 64, device);
  auto live = synth_windows(30, 8, device);
  auto test = synth_windows(10, 64, device);

  FuelNet net;
  net->to(device);
  pretrain(net, history, 4);
  std::cout << "MAPE after pretraining " << fuel_mape(net, test) << "%\n";

  finetune_anomaly(net, labelled);

  torch::optim::SGD online_opt(net->parameters(), torch::optim::SGDOptions(1e-4));
  net->train();
  for (const auto &w : live)
    online_update(net, online_opt, w);
  std::cout << "MAPE after the voyage " << fuel_mape(net, test) << "%\n";
  return 0;
}
