// Anomaly detection on pump-station telemetry: 12 sensors (pressures,
// currents, vibration RMS) sampled once a second, cut into 64-second
// windows. A 1-D convolutional autoencoder with batch norm scores windows by
// reconstruction error; a linear one-step-ahead predictor (no dropout, no
// batch norm) gives a second opinion on the last sample of each window.
// Switching the autoencoder's mode goes through two helpers the team uses
// everywhere: an RAII EvalScope, and a generic with_mode() that runs a
// callable with the module in a given mode and restores the previous one.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kSensors = 12, kWin = 64, kBatch = 32;

// Windows of normal operation: a daily cycle per sensor, coupled, with noise.
torch::Tensor telemetry(int64_t n, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto t = torch::arange(kWin, torch::kFloat).view({1, 1, kWin}) / 3600.0;
  auto phase = 6.28 * torch::rand({n, 1, 1}, gen);
  auto gain = 0.5 + torch::rand({1, kSensors, 1}, gen);
  return gain * torch::sin(t * 6.28 + phase) + 0.05 * torch::randn({n, kSensors, kWin}, gen);
}

torch::nn::Conv1dOptions conv(int64_t in, int64_t out) { return torch::nn::Conv1dOptions(in, out, 5).padding(2); }

struct ConvAEImpl : torch::nn::Module {
  ConvAEImpl()
      : enc(register_module("enc", torch::nn::Sequential(torch::nn::Conv1d(conv(kSensors, 32)),
                                                         torch::nn::BatchNorm1d(32), torch::nn::ReLU(),
                                                         torch::nn::Conv1d(conv(32, 8))))),
        dec(register_module("dec", torch::nn::Sequential(torch::nn::Conv1d(conv(8, 32)), torch::nn::BatchNorm1d(32),
                                                         torch::nn::ReLU(), torch::nn::Conv1d(conv(32, kSensors))))) {}

  torch::Tensor forward(const torch::Tensor &x) { return dec->forward(enc->forward(x)); }

  torch::nn::Sequential enc, dec;
};
TORCH_MODULE(ConvAE);

// Predicts the last sample of every sensor from the 63 before it.
struct LinearPredictorImpl : torch::nn::Module {
  LinearPredictorImpl() : lin(register_module("lin", torch::nn::Linear(kSensors * (kWin - 1), kSensors))) {}

  torch::Tensor forward(const torch::Tensor &x) { return lin->forward(x.narrow(2, 0, kWin - 1).flatten(1)); }

  torch::nn::Linear lin;
};
TORCH_MODULE(LinearPredictor);

struct Detectors {
  ConvAE ae;
  LinearPredictor pred;
};

// Puts a module in eval() for a scope and back in train() when it ends.
class EvalScope {
 public:
  explicit EvalScope(torch::nn::Module &m) : m_(m) { m_.eval(); }
  ~EvalScope() { m_.train(); }
  EvalScope(const EvalScope &) = delete;
  EvalScope &operator=(const EvalScope &) = delete;

 private:
  torch::nn::Module &m_;
};

// Runs fn with m in the given mode, then restores the mode m had.
template <typename Fn>
auto with_mode(torch::nn::Module &m, bool training, Fn &&fn) {
  const bool was_training = m.is_training();
  m.train(training);
  auto result = fn();
  m.train(was_training);
  return result;
}

torch::Tensor loss_of(ConvAE &ae, const torch::Tensor &x) { return torch::mse_loss(ae->forward(x), x); }
torch::Tensor loss_of(LinearPredictor &p, const torch::Tensor &x) {
  return torch::mse_loss(p->forward(x), x.select(2, kWin - 1));
}

template <typename Model>
void fit(Model &model, torch::Device device, int64_t steps, double lr, uint64_t seed) {
  model->train();
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(lr));
  double smoothed = 0.0;
  for (int64_t step = 0; step < steps; ++step) {
    auto x = telemetry(kBatch, seed + static_cast<uint64_t>(step)).to(device);
    opt.zero_grad();
    auto loss = loss_of(model, x);
    loss.backward();
    opt.step();
    // BUG(torch-host-sync-in-loop): the smoothed curve reads the loss back
    // on every step of both instantiations.
    smoothed = 0.98 * smoothed + 0.02 * loss.template item<double>();
  }
  std::cout << "  smoothed loss " << smoothed << "\n";
}

// Seconds (window starts) whose reconstruction error is above threshold.
std::vector<int64_t> scan_station(ConvAE &ae, const torch::Tensor &stream, double threshold, torch::Device device) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> alarms;
  for (int64_t s = 0; s + kWin <= stream.size(1); s += kWin / 2) {
    auto x = stream.narrow(1, s, kWin).unsqueeze(0).to(device);
    // BUG(torch-eval-mode-missing): the EvalScope in main() ended before
    // this call and its destructor put the autoencoder back in train().
    auto err = (ae->forward(x) - x).pow(2).mean();
    auto host = err.to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): the error is compared on the host
    // while the copy back may still be in flight.
    if (host.item<double>() > threshold)
      alarms.push_back(s);
  }
  return alarms;
}

// Mean absolute error of the predictor over a day of windows.
double forecast_mae(Detectors &det, const torch::Tensor &windows, torch::Device device) {
  double abs_err = 0.0;
  for (int64_t s = 0; s < windows.size(0); s += 256) {
    auto x = windows.narrow(0, s, std::min<int64_t>(256, windows.size(0) - s)).to(device);
    // BUG(torch-inference-without-no-grad): a report loop that never
    // trains, with autograd recording every chunk.
    // OK(torch-eval-mode-missing): the predictor has no dropout or batch norm.
    auto y = det.pred->forward(x);
    abs_err += (y - x.select(2, kWin - 1)).abs().sum().item<double>();
  }
  return abs_err / static_cast<double>(windows.size(0) * kSensors);
}

// Short fine-tune on the last hour of normal windows after a sensor swap.
void adapt_online(Detectors &det, torch::Device device, int64_t steps) {
  torch::optim::SGD opt(det.ae->parameters(), torch::optim::SGDOptions(1e-4).momentum(0.9));
  for (int64_t step = 0; step < steps; ++step) {
    auto x = telemetry(kBatch, 90000 + static_cast<uint64_t>(step)).to(device);
    opt.zero_grad();
    // BUG(torch-eval-mode-missing): main() called eval() for the export and
    // nothing switched back: this trains with frozen batch statistics.
    auto loss = torch::mse_loss(det.ae->forward(x), x);
    loss.backward();
    opt.step();
  }
}

int main() {
  torch::manual_seed(233);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Detectors det{ConvAE(), LinearPredictor()};
  det.ae->to(device);
  det.pred->to(device);
  fit(det.ae, device, 1500, 1e-3, 1);
  fit(det.pred, device, 800, 5e-3, 500000);

  auto holdout = telemetry(2048, 7).to(device);
  double threshold = 0.0;
  {
    EvalScope scoring(*det.ae);
    torch::NoGradGuard no_grad;
    // OK(torch-eval-mode-missing): the scope's constructor called eval().
    auto err = (det.ae->forward(holdout) - holdout).pow(2).mean(std::vector<int64_t>{1, 2});
    threshold = err.quantile(0.999).item<double>();
  }

  const double ref_err = with_mode(*det.ae, /*training=*/false, [&] {
    torch::NoGradGuard no_grad;
    auto ref = telemetry(256, 8).to(device);
    // OK(torch-eval-mode-missing): with_mode() runs the lambda in eval().
    return (det.ae->forward(ref) - ref).pow(2).mean().item<double>();
  });
  std::cout << "threshold " << threshold << ", reference error " << ref_err << "\n";

  {
    torch::NoGradGuard no_grad;
    auto probe = telemetry(64, 9).to(device);
    // OK(torch-eval-mode-missing): no mode-dependent layer in the predictor.
    auto resid = (det.pred->forward(probe) - probe.select(2, kWin - 1)).abs().max().item<double>();
    std::cout << "predictor max residual " << resid << "\n";
  }

  auto stream = telemetry(1, 10)[0].repeat({1, 40});
  stream.narrow(1, 1200, 90).mul_(2.5);  // cavitation episode
  const auto alarms = scan_station(det.ae, stream, threshold, device);
  std::cout << alarms.size() << " alarm windows\n";
  std::cout << "forecast mae " << forecast_mae(det, telemetry(4096, 11), device) << "\n";

  det.ae->eval();
  torch::save(det.ae, "pump_ae.pt");
  adapt_online(det, device, 60);
  torch::save(det.ae, "pump_ae_adapted.pt");
  return 0;
}
