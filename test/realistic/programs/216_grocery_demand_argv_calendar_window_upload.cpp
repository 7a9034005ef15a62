// Daily demand forecasting for a grocery chain's replenishment system: an
// LSTM encoder reads 56 days of unit sales per store-item and a head emits the
// next 14 days (log1p units), conditioned on price, promotion and calendar
// covariates. Sales are synthetic: weekly seasonality, promo uplift, price
// elasticity and holiday spikes. The GPU ordinal comes from argv. Calendar
// tables live in an unordered_map member that to() moves; host windows come
// from a factory and go to the device through upload(); the backtest hands its
// forecast back to the host through an output parameter.
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <unordered_map>

namespace F = torch::nn::functional;

constexpr int64_t kDays = 730, kLookback = 56, kHorizon = 14, kCov = 4, kItems = 64;
constexpr double kPi = 3.14159265358979323846;

torch::Device device_from_argv(int argc, char **argv) {
  // BUG(torch-device-index-unchecked): the default ordinal is the second GPU
  // and nothing compares it with device_count().
  int ordinal = 1;
  bool cpu = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--cpu") cpu = true;
    else if (arg == "--gpu" && i + 1 < argc) ordinal = std::stoi(argv[++i]);
  }
  if (cpu || !torch::cuda::is_available())
    return torch::Device(torch::kCPU);
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(ordinal));
}

// Day-indexed covariates shared by every store-item.
class CalendarFeatures {
 public:
  explicit CalendarFeatures(int64_t days) {
    auto day = torch::arange(days, torch::kFloat);
    tables_["weekly"] = torch::sin(day * (2.0 * kPi / 7.0));
    tables_["holiday"] = (torch::fmod(day * 7.0 + 3.0, 113.0) < 7.0).to(torch::kFloat);
    tables_["payday"] = (torch::fmod(day, 30.0) < 2.0).to(torch::kFloat);
  }
  void to(torch::Device device) {
    for (auto &[name, table] : tables_)
      table = table.to(device);
  }
  torch::Tensor window(const std::string &name, int64_t start, int64_t len) const {
    return tables_.at(name).narrow(0, start, len);
  }

 private:
  std::unordered_map<std::string, torch::Tensor> tables_;
};

struct SalesPanel {
  torch::Tensor units;  // [kItems, kDays] log1p units
  torch::Tensor price;  // [kItems, kDays] relative price
  torch::Tensor promo;  // [kItems, kDays] 0/1
};

SalesPanel simulate_panel(const CalendarFeatures &cal) {
  auto base = torch::rand({kItems, 1}) * 40 + 5;
  auto price = 1.0 + 0.1 * torch::randn({kItems, kDays}).cumsum(1) / 10.0;
  auto promo = (torch::rand({kItems, kDays}) < 0.08).to(torch::kFloat);
  auto season = 1.0 + 0.25 * cal.window("weekly", 0, kDays).view({1, kDays});
  auto spikes = 1.0 + 0.8 * cal.window("holiday", 0, kDays).view({1, kDays});
  auto rate = base * season * spikes * (1.0 + 0.6 * promo) * price.pow(-1.5);
  return {torch::log1p(torch::poisson(rate)), price, promo};
}

struct HostWindow {
  torch::Tensor history, covariates, target;  // [B,L,1], [B,H,2] price+promo, [B,H]
};
struct DeviceWindow {
  torch::Tensor history, covariates, target;
};

HostWindow make_host_window(int64_t batch) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat);
  return {torch::empty({batch, kLookback, 1}, opts).pin_memory(),
          torch::empty({batch, kHorizon, 2}, opts).pin_memory(), torch::empty({batch, kHorizon}, opts)};
}

void fill_window(HostWindow &w, const SalesPanel &panel, int64_t t0) {
  const int64_t b = w.history.size(0);
  auto items = torch::randint(kItems, {b}, torch::kLong);
  auto units = panel.units.index_select(0, items);
  w.history.copy_(units.narrow(1, t0, kLookback).unsqueeze(-1));
  w.target.copy_(units.narrow(1, t0 + kLookback, kHorizon));
  auto fut = [&](const torch::Tensor &m) { return m.index_select(0, items).narrow(1, t0 + kLookback, kHorizon); };
  w.covariates.copy_(torch::stack({fut(panel.price), fut(panel.promo)}, -1));
}

DeviceWindow upload(const HostWindow &w, torch::Device device) {
  // BUG(torch-non-blocking-pageable): fit() hands over a make_host_window()
  // window; its history and covariates are pinned, its target never was.
  return {w.history.to(device, /*non_blocking=*/true), w.covariates.to(device, /*non_blocking=*/true),
          w.target.to(device, /*non_blocking=*/true)};
}

struct DemandNetImpl : torch::nn::Module {
  DemandNetImpl()
      : encoder(register_module("encoder", torch::nn::LSTM(torch::nn::LSTMOptions(1, 64).num_layers(2).batch_first(true)))),
        head(register_module("head", torch::nn::Sequential(torch::nn::Linear(64 + kHorizon * kCov, 128), torch::nn::GELU(),
                                                           torch::nn::Dropout(0.1), torch::nn::Linear(128, kHorizon)))) {}
  torch::Tensor forward(const torch::Tensor &history, const torch::Tensor &covariates) {
    auto h = std::get<0>(encoder->forward(history)).select(1, -1);
    return head->forward(torch::cat({h, covariates.flatten(1)}, 1));
  }
  torch::nn::LSTM encoder;
  torch::nn::Sequential head;
};
TORCH_MODULE(DemandNet);

class WapeMeter {
 public:
  void update(const torch::Tensor &pred, const torch::Tensor &target) {
    auto units_pred = torch::expm1(pred), units_true = torch::expm1(target);
    // BUG(torch-host-sync-in-loop): after_step() feeds the meter on every
    // training step, and this copy to the host waits for the GPU.
    auto sums = torch::stack({(units_pred - units_true).abs().sum(), units_true.sum()}).to(torch::kCPU);
    abs_err_ += sums[0].item<double>();
    volume_ += sums[1].item<double>();
  }
  double value() const { return volume_ > 0 ? abs_err_ / volume_ : 0.0; }
  void reset() { abs_err_ = volume_ = 0.0; }

 private:
  double abs_err_ = 0.0, volume_ = 0.0;
};

class Trainer {
 public:
  Trainer(DemandNet net, torch::Device device) : net_(net), device_(device), opt_(net->parameters(), 1e-3), rng_(216) {}

  void fit(const SalesPanel &panel, const CalendarFeatures &cal, int64_t steps) {
    HostWindow host = make_host_window(256);
    std::uniform_int_distribution<int64_t> start(0, kDays - 120 - kLookback - kHorizon);
    net_->train();
    for (int64_t step = 1; step <= steps; ++step) {
      const int64_t t0 = start(rng_);
      fill_window(host, panel, t0);
      DeviceWindow batch = upload(host, device_);
      auto calendar = torch::stack({cal.window("holiday", t0 + kLookback, kHorizon),
                                    cal.window("payday", t0 + kLookback, kHorizon)}, -1);
      // OK(torch-device-mismatch): main() moved every calendar table with
      // cal.to(device) before fit().
      auto covariates = torch::cat({batch.covariates, calendar.unsqueeze(0).expand({256, kHorizon, 2})}, -1);
      auto pred = net_->forward(batch.history, covariates);
      auto loss = F::mse_loss(pred, batch.target);
      opt_.zero_grad();
      loss.backward();
      opt_.step();
      after_step(step, pred.detach(), batch.target, loss.detach());
    }
  }

 private:
  void after_step(int64_t step, const torch::Tensor &pred, const torch::Tensor &target, const torch::Tensor &loss) {
    wape_.update(pred, target);
    if (step % 250 == 0) {
      // OK(torch-host-sync-in-loop): only every 250 steps.
      std::cout << "step " << step << " mse " << loss.to(torch::kCPU).item<float>() << " wape " << wape_.value() << "\n";
      wape_.reset();
    }
  }

  DemandNet net_;
  torch::Device device_;
  torch::optim::Adam opt_;
  WapeMeter wape_;
  std::mt19937_64 rng_;
};

void forecast_to_host(const torch::Tensor &pred, torch::Tensor &host_out) {
  host_out = pred.to(torch::kCPU, /*non_blocking=*/true);
}

std::tuple<torch::Tensor, torch::Tensor> band_to_host(const torch::Tensor &lo, const torch::Tensor &hi) {
  return {lo.to(torch::kCPU, /*non_blocking=*/true), hi.to(torch::kCPU, /*non_blocking=*/true)};
}

void write_csv(const std::string &path, const torch::Tensor &forecast) {
  // BUG(torch-tensor-to-discarded): contiguous() returns a new tensor; the
  // pointer below still walks the original strides.
  forecast.contiguous();
  const float *p = forecast.data_ptr<float>();
  std::ofstream out(path);
  for (int64_t i = 0; i < forecast.size(0); ++i) {
    for (int64_t d = 0; d < kHorizon; ++d) out << (d ? "," : "") << std::expm1(p[i * kHorizon + d]);
    out << "\n";
  }
}

void backtest(DemandNet &net, const SalesPanel &panel, torch::Device device) {
  torch::NoGradGuard no_grad;
  net->eval();
  CalendarFeatures holiday_cal(kDays);
  const int64_t t0 = kDays - kLookback - kHorizon;
  auto history = panel.units.narrow(1, t0, kLookback).unsqueeze(-1).to(device);
  auto future = [&](const torch::Tensor &m) { return m.narrow(1, t0 + kLookback, kHorizon); };
  auto days = [&](const char *name) {
    return holiday_cal.window(name, t0 + kLookback, kHorizon).view({1, kHorizon}).expand({kItems, kHorizon});
  };
  auto cov = torch::stack({future(panel.price), future(panel.promo), days("holiday"), days("payday")}, -1).to(device);
  auto pred = net->forward(history, cov);
  // BUG(torch-device-mismatch): holiday_cal was never moved; its window is a
  // CPU [kHorizon] tensor and pred is on `device`.
  auto adjusted = pred + 0.1 * holiday_cal.window("holiday", t0 + kLookback, kHorizon);
  torch::Tensor host;
  forecast_to_host(adjusted, host);
  // BUG(torch-non-blocking-d2h-race): forecast_to_host() started a
  // non-blocking copy into `host`; write_csv reads it with no sync in between.
  write_csv("forecast_14d.csv", host);

  auto [lo, hi] = band_to_host(adjusted - 0.2, adjusted + 0.2);
  if (device.is_cuda())
    c10::cuda::getCurrentCUDAStream().synchronize();
  // OK(torch-non-blocking-d2h-race): the stream was synchronised first.
  std::cout << "mean band width " << (hi - lo).mean().item<float>() << " first item low " << lo[0][0].item<float>() << "\n";
  net->train();
}

int main(int argc, char **argv) {
  torch::manual_seed(216);
  const torch::Device device = device_from_argv(argc, argv);
  CalendarFeatures cal(kDays);
  SalesPanel panel = simulate_panel(cal);
  cal.to(device);
  DemandNet net;
  net->to(device);
  Trainer trainer(net, device);
  trainer.fit(panel, cal, 5000);
  backtest(net, panel, device);
  torch::save(net, "demand_lstm.pt");
  return 0;
}
