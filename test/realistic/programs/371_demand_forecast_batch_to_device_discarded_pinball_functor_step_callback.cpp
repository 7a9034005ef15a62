// Retail demand forecasting: a quantile MLP predicts the next week of daily
// sales (10th, 50th and 90th percentiles) for every store-item series from the
// last four weeks, the calendar and an item embedding. Batches are moved by
// small helpers (one moves a Batch in place, one returns a moved copy); the
// pinball loss is a functor holding its quantile levels; the application
// follows training through a step callback; a backtest and a multi-week
// rollout run after training.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace demand {

constexpr int64_t kHistory = 28, kHorizon = 7, kQ = 3, kItems = 500;

struct DemandNetImpl : nn::Module {
  DemandNetImpl()
      : item_emb(register_module("item_emb", nn::Embedding(kItems, 8))),
        mlp(register_module("mlp", nn::Sequential(nn::Linear(kHistory + 7 + 8, 128), nn::ReLU(), nn::Dropout(0.1),
                                                  nn::Linear(128, 128), nn::ReLU(), nn::Linear(128, kHorizon * kQ)))) {}

  // history B x kHistory (log1p sales), calendar B x 7, item_ids B -> B x kHorizon x kQ
  torch::Tensor forward(const torch::Tensor &history, const torch::Tensor &calendar, const torch::Tensor &item_ids) {
    auto x = torch::cat({history, calendar, item_emb->forward(item_ids)}, 1);
    return mlp->forward(x).view({-1, kHorizon, kQ});
  }

  nn::Embedding item_emb;
  nn::Sequential mlp;
};
TORCH_MODULE(DemandNet);

struct Batch {
  torch::Tensor history;   // B x kHistory
  torch::Tensor calendar;  // B x 7, one-hot weekday of the first forecast day
  torch::Tensor item_ids;  // B
  torch::Tensor target;    // B x kHorizon, log1p sales
};

// Moves every field of the batch, in place.
void to_device(Batch &b, torch::Device device) {
  b.history = b.history.to(device);
  b.calendar = b.calendar.to(device);
  b.item_ids = b.item_ids.to(device);
  b.target = b.target.to(device);
}

// Returns a copy of the batch on the device; the argument is left where it was.
Batch on_device(const Batch &b, torch::Device device) {
  return {b.history.to(device), b.calendar.to(device), b.item_ids.to(device), b.target.to(device)};
}

// Weekly-seasonal series with an item-specific level.
class DataSource {
 public:
  explicit DataSource(uint64_t seed) : gen_(at::detail::createCPUGenerator(seed)) {}
  Batch next(int64_t b) {
    auto items = torch::randint(0, kItems, {b}, gen_, torch::kLong);
    auto level = 1.0 + (items.to(torch::kFloat) / kItems).unsqueeze(1) * 3.0;
    auto start = torch::randint(0, 7, {b}, gen_, torch::kLong);
    auto days = torch::arange(kHistory + kHorizon, torch::kFloat).unsqueeze(0) + start.to(torch::kFloat).unsqueeze(1);
    auto sales = torch::log1p(torch::relu(level * (1.0 + 0.3 * torch::sin(days * (2.0 * M_PI / 7.0))) +
                                          0.2 * torch::randn({b, kHistory + kHorizon}, gen_)));
    auto calendar = F::one_hot((start + kHistory) % 7, 7).to(torch::kFloat);
    return {sales.narrow(1, 0, kHistory), calendar, items, sales.narrow(1, kHistory, kHorizon)};
  }

 private:
  at::Generator gen_;
};

// Pinball loss of a residual (target - forecast) at fixed quantile levels.
class PinballLoss {
 public:
  PinballLoss() : levels_(torch::tensor({0.1f, 0.5f, 0.9f})) {}
  torch::Tensor operator()(const torch::Tensor &residual) const {
    return torch::max(levels_ * residual, (levels_ - 1.0) * residual).mean();
  }

 private:
  torch::Tensor levels_;
};

struct EpochMetrics {
  torch::Tensor abs_err;
  torch::Tensor volume;
};

class Forecaster {
 public:
  using StepCallback = std::function<void(int64_t, const torch::Tensor &)>;

  Forecaster(DemandNet net, torch::Device device)
      : net_(std::move(net)), device_(device), opt_(net_->parameters(), torch::optim::AdamOptions(1e-3)) {
    net_->to(device_);
  }
  void on_step(StepCallback cb) { on_step_ = std::move(cb); }

  void fit(DataSource &source, int64_t epochs, int64_t steps) {
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      net_->train();
      EpochMetrics m{torch::zeros({}, torch::TensorOptions().device(device_)), torch::zeros({}, torch::TensorOptions().device(device_))};
      for (int64_t step = 0; step < steps; ++step) {
        Batch b = source.next(64);
        to_device(b, device_);
        opt_.zero_grad();
        // OK(torch-device-mismatch): to_device() moved every field of b in place.
        auto pred = net_->forward(b.history, b.calendar, b.item_ids);
        // BUG(torch-device-mismatch): the functor's quantile levels were built on the CPU; the residual is on device_.
        auto loss = pinball_(b.target.unsqueeze(2) - pred);
        loss.backward();
        opt_.step();
        // BUG(torch-loss-accumulation-graph): the median forecast still carries its graph into the epoch's error sum.
        m.abs_err += (pred.select(2, 1) - b.target).abs().sum();
        // OK(torch-loss-accumulation-graph): the targets carry no graph.
        m.volume += b.target.sum();
        on_step_(step, loss);
      }
      // OK(torch-host-sync-in-loop): the epoch loop trains nothing itself; one read per epoch.
      const double wape = (m.abs_err / m.volume).item<double>();
      if (wape < best_wape_) best_wape_ = wape;
      std::cout << "epoch " << epoch << " WAPE " << wape << '\n';
    }
  }

  double backtest(DataSource &source, int64_t windows) {
    torch::NoGradGuard no_grad;
    net_->eval();
    double abs_err = 0.0, volume = 0.0;
    for (int64_t w = 0; w < windows; ++w) {
      Batch b = source.next(128);
      on_device(b, device_);
      // BUG(torch-device-mismatch): on_device() returned the moved copy and it was dropped; b is still on the host.
      auto median = net_->forward(b.history, b.calendar, b.item_ids).select(2, 1);
      abs_err += torch::expm1(median).sub(torch::expm1(b.target)).abs().sum().item<double>();
      volume += torch::expm1(b.target).sum().item<double>();
    }
    return abs_err / std::max(volume, 1e-9);
  }

  // Autoregressive forecast several weeks out, each week feeding the next.
  torch::Tensor rollout(const Batch &seed, int64_t weeks) {
    net_->eval();
    Batch b = on_device(seed, device_);
    std::vector<torch::Tensor> out;
    for (int64_t w = 0; w < weeks; ++w) {
      // BUG(torch-inference-without-no-grad): the rollout runs with autograd recording every week's forward.
      auto median = net_->forward(b.history, b.calendar, b.item_ids).select(2, 1);
      out.push_back(median);
      b.history = torch::cat({b.history.narrow(1, kHorizon, kHistory - kHorizon), median}, 1);
    }
    return torch::cat(out, 1);
  }

  double best_wape() const { return best_wape_; }

 private:
  DemandNet net_;
  torch::Device device_;
  torch::optim::Adam opt_;
  PinballLoss pinball_;
  StepCallback on_step_ = [](int64_t, const torch::Tensor &) {};
  double best_wape_ = 1e9;
};

}  // namespace demand

int main() {
  using namespace demand;
  torch::manual_seed(371);
  // OK(torch-cuda-unguarded): CUDA only when the runtime reports it.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  DataSource train_source(1), test_source(2);

  Forecaster forecaster(DemandNet(), device);
  std::vector<float> curve;
  forecaster.on_step([&curve](int64_t step, const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): the callback runs on every training step and reads the loss on the host.
    curve.push_back(loss.item<float>());
    if (step % 100 == 0) std::cout << "step " << step << " loss " << curve.back() << '\n';
  });
  forecaster.fit(train_source, 3, 200);
  std::cout << "best WAPE " << forecaster.best_wape() << " backtest WAPE " << forecaster.backtest(test_source, 10) << '\n';

  auto seed = test_source.next(4);
  auto weeks = forecaster.rollout(seed, 4).cpu();
  std::cout << "rollout " << weeks.sizes() << " first item week 4 " << torch::expm1(weeks[0].narrow(0, 21, 7)).sum().item<double>() << '\n';
  return 0;
}
