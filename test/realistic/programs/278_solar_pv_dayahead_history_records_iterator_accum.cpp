// Day-ahead PV power forecasting for a portfolio of rooftop sites. A two-layer
// LSTM reads the last 48 hours of (power, irradiance, cloud cover,
// temperature, sun elevation, humidity) and predicts the next 24 hours of
// normalised power. The trainer keeps one record per epoch for the run
// report; a new site is fine-tuned on its first weeks of data with gradient
// accumulation, walking its windows with an iterator. A rollout then chains
// day-ahead forecasts over a week of NWP weather.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kPast = 48, kHorizon = 24, kFeatures = 6;

struct SolarConfig {
  double lr = 2e-3;
  int epochs = 3;
  std::optional<int64_t> accum_steps;  // from the site's yaml; unset for big sites
  bool release_grad_memory = false;
  int64_t rollout_days = 7;
  double capacity_kw = 8.5;
};

struct PvForecasterImpl : nn::Module {
  explicit PvForecasterImpl(int64_t hidden)
      : lstm(register_module("lstm", nn::LSTM(nn::LSTMOptions(kFeatures, hidden).num_layers(2).batch_first(true)))),
        drop(register_module("drop", nn::Dropout(0.2))),
        head(register_module("head", nn::Linear(hidden, kHorizon))) {}
  // x [B, kPast, kFeatures] -> normalised power [B, kHorizon]
  torch::Tensor forward(const torch::Tensor& x) {
    auto out = std::get<0>(lstm->forward(x));
    return torch::sigmoid(head->forward(drop->forward(out.select(1, -1))));
  }
  nn::LSTM lstm;
  nn::Dropout drop;
  nn::Linear head;
};
TORCH_MODULE(PvForecaster);

struct Window {
  torch::Tensor x, y;  // [B, kPast, kFeatures], [B, kHorizon]
  std::string site;
};

struct EpochRecord {
  int epoch;
  torch::Tensor train_mse, val_mae;
  int64_t batches;
};

// The SCADA export stores channels first; the LSTM wants time first.
std::vector<Window> load_windows(int64_t n, int64_t bs, const std::string& site, torch::Device device) {
  std::vector<Window> windows;
  for (int64_t i = 0; i < n; ++i) {
    auto raw = torch::rand({bs, kFeatures, kPast}, torch::TensorOptions().device(device));
    windows.push_back({raw.transpose(1, 2), torch::rand({bs, kHorizon}, torch::TensorOptions().device(device)), site});
  }
  for (auto& w : windows) {
    // BUG(torch-tensor-to-discarded): contiguous() returns a new tensor;
    // the window keeps its strided view.
    w.x.contiguous();
  }
  return windows;
}

class DayAheadTrainer {
 public:
  using GradHook = void (DayAheadTrainer::*)();

  DayAheadTrainer(PvForecaster model, const SolarConfig& cfg, torch::Device device)
      : model_(model), cfg_(cfg), device_(device),
        opt_(model->parameters(), torch::optim::AdamWOptions(cfg.lr).weight_decay(1e-4)),
        after_update_(cfg.release_grad_memory ? &DayAheadTrainer::release_grads : &DayAheadTrainer::zero_grads) {}

  void fit(const std::vector<Window>& train, const std::vector<Window>& val) {
    for (int epoch = 0; epoch < cfg_.epochs; ++epoch) {
      history_.push_back({epoch, torch::zeros({}, device_), torch::zeros({}, device_), 0});
      EpochRecord& rec = history_.back();
      model_->train();
      (this->*after_update_)();
      for (const auto& w : train) {
        auto loss = F::mse_loss(model_->forward(w.x), w.y);
        loss.backward();
        // OK(torch-missing-zero-grad): after_update_ is one of the two resets.
        opt_.step();
        (this->*after_update_)();
        // BUG(torch-loss-accumulation-graph): rec is this epoch's record in
        // history_, which lives for the whole run and keeps every graph.
        rec.train_mse += loss;
        ++rec.batches;
      }
      validate(val, rec);
      std::cout << "epoch " << epoch << " train mse " << rec.train_mse.item<double>() / double(rec.batches)
                << " val mae " << rec.val_mae.item<double>() / double(val.size()) << '\n';
    }
  }
  const std::vector<EpochRecord>& history() const { return history_; }

 private:
  void validate(const std::vector<Window>& val, EpochRecord& rec) {
    torch::NoGradGuard no_grad;
    model_->eval();
    for (const auto& w : val) {
      // OK(torch-loss-accumulation-graph, torch-inference-without-no-grad, torch-eval-mode-missing): guarded, eval().
      rec.val_mae += (model_->forward(w.x) - w.y).abs().mean();
    }
  }
  void zero_grads() { opt_.zero_grad(); }
  void release_grads() {
    for (auto& p : model_->parameters())
      p.mutable_grad().reset();
  }

  PvForecaster model_;
  SolarConfig cfg_;
  torch::Device device_;
  torch::optim::AdamW opt_;
  GradHook after_update_;
  std::vector<EpochRecord> history_;
};

// A new site has a few weeks of data in small batches: accumulate.
void finetune_new_site(PvForecaster& model, const std::vector<Window>& site, const SolarConfig& cfg) {
  const int64_t accum = cfg.accum_steps.value_or(4);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(cfg.lr * 0.2));
  std::function<void()> reset_hook = [&opt] { opt.zero_grad(); };
  model->train();
  auto it = site.begin();
  int64_t micro = 0, updates = 0;
  while (it != site.end()) {
    if (micro == 0)
      reset_hook();
    auto loss = F::mse_loss(model->forward(it->x), it->y);
    // BUG(torch-grad-accumulation-unscaled): `accum` mean losses are summed
    // into the gradients before each step and never divided by it.
    loss.backward();
    ++micro;
    ++it;
    if (micro == accum) {
      // OK(torch-missing-zero-grad): micro is 0 again, so the next
      // iteration starts with reset_hook().
      opt.step();
      micro = 0;
      ++updates;
    }
  }
  std::cout << "site " << site.front().site << ": " << updates << " updates\n";
}

// Chains day-ahead forecasts: each day's forecast becomes the power channel
// of the next day's input. Returns the forecast energy in kWh.
double rollout_energy(PvForecaster& model, torch::Tensor window, const torch::Tensor& nwp, const SolarConfig& cfg) {
  model->eval();
  double kwh = 0.0;
  for (int64_t day = 0; day < cfg.rollout_days; ++day) {
    // BUG(torch-inference-without-no-grad): no guard, no backward; the
    // whole week's chain of forwards is recorded.
    auto next = model->forward(window);  // [1, kHorizon]
    kwh += next.sum().item<double>() * cfg.capacity_kw;
    auto rows = torch::cat({next.unsqueeze(2), nwp.slice(1, day * kHorizon, (day + 1) * kHorizon)}, 2);
    window = torch::cat({window.slice(1, kHorizon), rows}, 1);
  }
  return kwh;
}

int main() {
  torch::manual_seed(278);
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  SolarConfig cfg;
  PvForecaster model(128);
  model->to(device);

  DayAheadTrainer trainer(model, cfg, device);
  trainer.fit(load_windows(80, 64, "portfolio", device), load_windows(8, 64, "portfolio", device));
  for (const auto& rec : trainer.history())
    std::cout << "report epoch " << rec.epoch << " batches " << rec.batches << '\n';

  SolarConfig small_site = cfg;
  small_site.accum_steps = 8;
  finetune_new_site(model, load_windows(24, 8, "rooftop-1187", device), small_site);

  auto last = load_windows(1, 1, "rooftop-1187", device).front().x;
  auto nwp = torch::rand({1, cfg.rollout_days * kHorizon, kFeatures - 1}, torch::TensorOptions().device(device));
  std::cout << "week-ahead energy " << rollout_energy(model, last, nwp, cfg) << " kWh\n";
}
