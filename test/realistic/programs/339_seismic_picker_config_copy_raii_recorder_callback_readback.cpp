// Event detector for a regional seismic network: a 1-D CNN reads 30 s of
// 3-component 100 Hz waveform and emits a per-sample event probability. The
// trainer keeps a copy of the run's DetectorConfig and a device-resident
// batch buffer it refills every step; a scope guard records each step's loss
// even when the step throws. In monitoring, each station's window is scored
// by the network, gated by a classical STA/LTA trigger, read back into a
// pinned host buffer and handed to the alerting callback.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <random>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace quake {

constexpr int64_t kComponents = 3, kRate = 100, kWindow = 30 * kRate, kStations = 12;

struct DetectorConfig {
  torch::Device device{torch::kCPU};
  int64_t batch = 32, epochs = 4, steps_per_epoch = 100;
  double lr = 3e-4, sta_weight = 0.3;
};

struct PickerImpl : nn::Module {
  PickerImpl()
      : body(register_module("body", nn::Sequential(nn::Conv1d(nn::Conv1dOptions(kComponents, 16, 7).padding(3)),
                                                    nn::BatchNorm1d(16), nn::ReLU(),
                                                    nn::Conv1d(nn::Conv1dOptions(16, 32, 7).padding(3)),
                                                    nn::BatchNorm1d(32), nn::ReLU()))),
        out(register_module("out", nn::Conv1d(nn::Conv1dOptions(32, 1, 1)))) {}

  torch::Tensor forward(const torch::Tensor &x) { return out->forward(body->forward(x)).squeeze(1); }  // B x kWindow

  nn::Sequential body;
  nn::Conv1d out;
};
TORCH_MODULE(Picker);

struct EventSet {
  torch::Tensor waveforms;  // N x 3 x kWindow
  torch::Tensor masks;      // N x kWindow, 1 inside an event
};

EventSet synth_events(int64_t n, std::mt19937 &rng) {
  std::uniform_int_distribution<int64_t> onset(0, kWindow - 800), has(0, 2);
  auto waveforms = 0.05 * torch::randn({n, kComponents, kWindow});
  auto masks = torch::zeros({n, kWindow});
  auto t = torch::arange(800, torch::kFloat) / kRate;
  auto burst = torch::exp(-t) * torch::sin(2 * 3.14159265 * 4.0 * t);
  for (int64_t i = 0; i < n; ++i)
    if (has(rng) > 0) {
      const int64_t at = onset(rng);
      waveforms[i].narrow(1, at, 800).add_(burst);
      masks[i].narrow(0, at, 800).fill_(1.0);
    }
  return {waveforms, masks};
}

// A window from a station archive: float32 samples, component-major.
torch::Tensor window_from_archive(std::vector<float> &samples) {
  return torch::from_blob(samples.data(), {kComponents, kWindow}, torch::kFloat).clone();
}

// Classic STA/LTA ratio of the vertical component's energy (1 s / 10 s windows).
torch::Tensor sta_lta(const torch::Tensor &window) {
  auto energy = window[2].pow(2).view({1, 1, kWindow});
  auto sta = F::avg_pool1d(energy, F::AvgPool1dFuncOptions(kRate).stride(1).padding(kRate / 2));
  auto lta = F::avg_pool1d(energy, F::AvgPool1dFuncOptions(10 * kRate).stride(1).padding(5 * kRate));
  return (sta.narrow(2, 0, kWindow) / lta.narrow(2, 0, kWindow).clamp_min(1e-8)).view({kWindow});
}

// Appends the step's loss to the history when the step's scope ends, also when it throws.
class LossRecorder {
 public:
  LossRecorder(const torch::Tensor &loss, std::vector<float> &history) : loss_(loss), history_(history) {}
  ~LossRecorder() {
    // BUG(torch-host-sync-in-loop): a recorder lives in every training step
    // and reads the loss, on the trainer's device, when the step ends.
    history_.push_back(loss_.detach().item<float>());
  }

 private:
  torch::Tensor loss_;
  std::vector<float> &history_;
};

class EventTrainer {
 public:
  EventTrainer(Picker net, const DetectorConfig &cfg)
      : net_(std::move(net)), cfg_(cfg), device_(cfg.device),
        opt_(net_->parameters(), torch::optim::AdamOptions(cfg.lr)),
        batch_(torch::empty({cfg.batch, kComponents, kWindow}, torch::TensorOptions().device(device_))) {
    net_->to(device_);
  }

  Picker &net() { return net_; }
  const std::vector<float> &history() const { return history_; }

  double fit_epoch(const EventSet &data) {
    net_->train();
    auto total = torch::zeros({}, device_);
    for (int64_t step = 0; step < cfg_.steps_per_epoch; ++step) {
      auto idx = torch::randint(data.waveforms.size(0), {cfg_.batch}, torch::kLong);
      // BUG(torch-non-blocking-pageable): index_select() gathers the CPU
      // archive into fresh pageable memory; the copy into batch_ blocks anyway.
      batch_.copy_(data.waveforms.index_select(0, idx), /*non_blocking=*/true);
      auto target = data.masks.index_select(0, idx).to(device_);
      opt_.zero_grad();
      auto loss = F::binary_cross_entropy_with_logits(net_->forward(batch_), target);
      LossRecorder record(loss, history_);
      loss.backward();
      opt_.step();
      // OK(torch-loss-accumulation-graph, torch-host-sync-in-loop): detached, on the device.
      total += loss.detach();
      if (step % 25 == 0)
        // OK(torch-host-sync-in-loop): every 25 steps.
        std::cout << "  step " << step << " loss " << loss.item<double>() << '\n';
    }
    return total.item<double>() / static_cast<double>(cfg_.steps_per_epoch);
  }

 private:
  Picker net_;
  DetectorConfig cfg_;
  torch::Device device_;
  torch::optim::Adam opt_;
  torch::Tensor batch_;
  std::vector<float> history_;
};

// Fraction of windows whose detection (peak probability over the threshold) matches the label.
template <typename Net>
double window_accuracy(Net &net, const EventSet &set, torch::Device device, double threshold) {
  torch::NoGradGuard no_grad;
  net->eval();
  int64_t correct = 0;
  for (int64_t i = 0; i < set.waveforms.size(0); i += 64) {
    const int64_t n = std::min<int64_t>(64, set.waveforms.size(0) - i);
    torch::Tensor probs = torch::sigmoid(net->forward(set.waveforms.narrow(0, i, n).to(device)));
    auto has_event = set.masks.narrow(0, i, n).amax(1) > 0.5;
    // BUG(torch-device-mismatch): the windows were moved to 'device', their
    // masks were not.
    correct += (probs.amax(1) > threshold).eq(has_event).sum().item<int64_t>();
  }
  net->train();
  return static_cast<double>(correct) / static_cast<double>(set.waveforms.size(0));
}

class StreamMonitor {
 public:
  using Handler = std::function<void(int64_t station, const torch::Tensor &probs)>;

  StreamMonitor(Picker net, torch::Device device, double sta_weight, Handler on_window)
      : net_(std::move(net)), device_(device), sta_weight_(sta_weight), on_window_(std::move(on_window)),
        host_probs_(torch::empty({kWindow}, torch::TensorOptions().pinned_memory(true))) {
    net_->to(device_);
    net_->eval();
  }

  void process(int64_t station, std::vector<float> &samples) {
    c10::InferenceMode guard;
    auto window = window_from_archive(samples).to(device_);
    // OK(torch-device-mismatch): the trigger runs on the window, already on device_.
    auto probs = torch::sigmoid(net_->forward(window.unsqueeze(0))).squeeze(0) * (sta_lta(window) > 2.0);
    host_probs_.copy_(probs, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): the handler reads host_probs_ while
    // the copy from the device may still be running.
    on_window_(station, host_probs_);
  }

  // Peak of the network probability fused with the normalised STA/LTA ratio.
  double trigger_score(std::vector<float> &samples) {
    c10::InferenceMode guard;
    auto window = window_from_archive(samples);
    auto probs = torch::sigmoid(net_->forward(window.unsqueeze(0).to(device_))).squeeze(0);
    // BUG(torch-device-mismatch): sta_lta() of the CPU window stays on the CPU.
    auto fused = (1.0 - sta_weight_) * probs + sta_weight_ * (sta_lta(window) / 10.0).clamp_max(1.0);
    return fused.max().item<double>();
  }

 private:
  Picker net_;
  torch::Device device_;
  double sta_weight_;
  Handler on_window_;
  torch::Tensor host_probs_;
};

}  // namespace quake

int main() {
  using namespace quake;
  torch::manual_seed(339);
  std::mt19937 rng(339);
  DetectorConfig cfg;
  // OK(torch-cuda-unguarded): CUDA only when it is available.
  cfg.device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  auto train = synth_events(2048, rng), val = synth_events(512, rng);

  EventTrainer trainer(Picker(), cfg);
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    const double loss = trainer.fit_epoch(train);
    std::cout << "epoch " << epoch << " loss " << loss << " last step " << trainer.history().back() << " accuracy "
              << window_accuracy(trainer.net(), val, cfg.device, 0.5) << '\n';
  }

  std::vector<int64_t> alerts(kStations, 0);
  StreamMonitor monitor(trainer.net(), cfg.device, cfg.sta_weight, [&alerts](int64_t station, const torch::Tensor &p) {
    alerts[static_cast<size_t>(station)] += (p > 0.5).sum().item<int64_t>() > 50 ? 1 : 0;
  });
  auto archive = synth_events(kStations, rng).waveforms;
  double loudest = 0.0;
  for (int64_t s = 0; s < kStations; ++s) {
    std::vector<float> samples(archive[s].data_ptr<float>(), archive[s].data_ptr<float>() + kComponents * kWindow);
    monitor.process(s, samples);
    loudest = std::max(loudest, monitor.trigger_score(samples));
  }
  std::cout << "stations alerting: " << std::count(alerts.begin(), alerts.end(), 1) << ", loudest trigger "
            << loudest << '\n';
  return 0;
}
