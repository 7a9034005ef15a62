// Seismic P-phase picking on three-component (Z, N, E) 100 Hz waveforms: a
// small 1-D U-Net emits a per-sample arrival probability, trained against
// Gaussian targets around catalogue picks. The run configuration travels as
// one struct from main through the driver, the epoch runner and the step;
// held-out stations feed a coincidence associator after each epoch.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace seis {

constexpr int64_t kComponents = 3;

struct RunConfig {
  torch::Device device = torch::kCPU;
  int64_t window = 3000, batch = 16, epochs = 6, log_every = 100, min_stations = 3;
  double lr = 5e-4, pick_threshold = 0.5;
};

torch::Device pick_device() {
  // OK(torch-cuda-unguarded): CUDA only when the runtime reports one.
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

// Windows [B, 3, W] cut around catalogue picks, targets [B, W]; `valid` is
// 0 inside telemetry gaps, which the acquisition system zero-fills.
struct WaveBatch {
  torch::Tensor waves, picks, valid;
  std::string station;
};

WaveBatch synth_batch(const RunConfig &cfg, const std::string &station, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto waves = torch::randn({cfg.batch, kComponents, cfg.window}, gen).mul_(0.05);
  auto picks = torch::zeros({cfg.batch, cfg.window});
  auto valid = torch::ones({cfg.batch, cfg.window});
  auto t = torch::arange(cfg.window, torch::kFloat);
  for (int64_t i = 0; i < cfg.batch; ++i) {
    const int64_t onset = 500 + (i * 97 + static_cast<int64_t>(seed)) % (cfg.window - 1000);
    waves[i].narrow(1, onset, 400).add_(0.8 * torch::randn({kComponents, 400}, gen));
    picks[i].copy_(torch::exp(-(t - static_cast<double>(onset)).pow(2) / 800.0));
    if (i % 5 == 0)
      valid[i].narrow(0, (onset + 900) % (cfg.window - 200), 200).zero_();
  }
  waves.mul_(valid.unsqueeze(1));
  return {waves, picks, valid, station};
}

struct PickerNetImpl : nn::Module {
  PickerNetImpl()
      : enc1(register_module("enc1", nn::Conv1d(nn::Conv1dOptions(kComponents, 16, 7).padding(3)))),
        enc2(register_module("enc2", nn::Conv1d(nn::Conv1dOptions(16, 32, 7).stride(2).padding(3)))),
        head(register_module("head", nn::Conv1d(nn::Conv1dOptions(32, 1, 1)))),
        bn1(register_module("bn1", nn::BatchNorm1d(16))),
        bn2(register_module("bn2", nn::BatchNorm1d(32))),
        drop(register_module("drop", nn::Dropout(0.2))),
        up(register_module("up", nn::ConvTranspose1d(nn::ConvTranspose1dOptions(32, 16, 4).stride(2).padding(1)))) {}

  // [B, 3, W] -> per-sample logits [B, W]
  torch::Tensor forward(const torch::Tensor &x) {
    auto s1 = torch::relu(bn1->forward(enc1->forward(x)));
    auto s2 = drop->forward(torch::relu(bn2->forward(enc2->forward(s1))));
    auto u = torch::relu(up->forward(s2));
    return head->forward(torch::cat({u, s1}, 1)).squeeze(1);
  }
  nn::Conv1d enc1, enc2, head;
  nn::BatchNorm1d bn1, bn2;
  nn::Dropout drop;
  nn::ConvTranspose1d up;
};
TORCH_MODULE(PickerNet);

// Running training metrics for the epoch summary line.
class PickMetrics {
 public:
  explicit PickMetrics(torch::Device device)
      : loss_sum_(torch::zeros({}, device)), agree_(torch::zeros({}, device)) {}

  void reset() {
    loss_sum_.zero_();
    agree_.zero_();
    per_station_.clear();
    steps_ = samples_ = 0;
  }
  void update(const torch::Tensor &loss, const torch::Tensor &logits, const torch::Tensor &target) {
    // BUG(torch-loss-accumulation-graph): the member keeps every step's graph.
    loss_sum_ += loss;
    // OK(torch-loss-accumulation-graph): comparisons are bool tensors, no graph.
    agree_ += ((logits > 0) == (target > 0.5)).sum();
    ++steps_;
    samples_ += logits.numel();
  }
  void update_station(const std::string &station, const torch::Tensor &loss) {
    auto it = per_station_.find(station);
    if (it == per_station_.end()) {
      // OK(torch-loss-accumulation-graph): the first value is detached.
      per_station_.emplace(station, loss.detach());
    } else {
      // BUG(torch-loss-accumulation-graph): later steps add the attached loss via the iterator.
      it->second += loss;
    }
  }
  void print_stations() const {
    for (const auto &kv : per_station_)
      std::cout << "  " << kv.first << " bce sum " << kv.second.item<double>() << '\n';
  }
  double mean_loss() const {
    // OK(torch-host-sync-in-loop): read once per epoch by fit(); the batch
    // loop in run_epoch() is the training loop.
    return (loss_sum_ / static_cast<double>(std::max<int64_t>(steps_, 1))).item<double>();
  }
  double agreement() const { return (agree_ / static_cast<double>(std::max<int64_t>(samples_, 1))).item<double>(); }

 private:
  torch::Tensor loss_sum_, agree_;
  std::map<std::string, torch::Tensor> per_station_;
  int64_t steps_ = 0, samples_ = 0;
};

// Exponentially smoothed loss curve, printed every `every_` steps.
class StepLogger {
 public:
  explicit StepLogger(int64_t every) : every_(every) {}
  void log(int64_t step, const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): the smoothing reads the loss on every
    // step; only the print below is every N steps.
    const double value = loss.item<double>();
    smoothed_ = seen_++ == 0 ? value : 0.98 * smoothed_ + 0.02 * value;
    if (step % every_ == 0)
      std::cout << "step " << step << " smoothed bce " << smoothed_ << '\n';
  }

 private:
  int64_t every_, seen_ = 0;
  double smoothed_ = 0.0;
};

struct StepOut { torch::Tensor loss, logits, target; };

// Layer 3: one optimisation step.
StepOut train_step(PickerNet &net, torch::optim::Optimizer &opt, const WaveBatch &batch, const RunConfig &cfg) {
  // OK(torch-non-blocking-pageable): main() pins the training windows on a GPU run.
  auto x = batch.waves.to(cfg.device, /*non_blocking=*/true);
  auto target = batch.picks.to(cfg.device);
  opt.zero_grad();
  auto logits = net->forward(x);
  // OK(torch-device-mismatch): logits and target both on cfg.device.
  auto per_sample = F::binary_cross_entropy_with_logits(
      logits, target, F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone));
  // BUG(torch-device-mismatch): the gap mask never left the host, the
  // per-sample loss is on cfg.device.
  auto loss = (per_sample * batch.valid).sum() / batch.valid.sum().clamp_min(1.0);
  loss.backward();
  opt.step();
  return {loss, logits, target};
}

// Layer 2: one pass over the training windows.
void run_epoch(PickerNet &net, torch::optim::Optimizer &opt, const std::vector<WaveBatch> &train,
               const RunConfig &cfg, PickMetrics &metrics, StepLogger &logger, int64_t epoch) {
  int64_t step = epoch * static_cast<int64_t>(train.size());
  for (const auto &batch : train) {
    auto out = train_step(net, opt, batch, cfg);
    metrics.update(out.loss, out.logits, out.target);
    metrics.update_station(batch.station, out.loss);
    logger.log(step++, out.loss);
  }
}

struct StationPeaks {
  std::string station;
  torch::Tensor peak;  // [B] best probability per window, on the host
};

// Held-out stations: pick recall and per-window peaks for the associator.
std::vector<StationPeaks> validate(PickerNet &net, const std::vector<WaveBatch> &val, const RunConfig &cfg) {
  net->eval();
  torch::NoGradGuard no_grad;
  std::vector<StationPeaks> peaks;
  int64_t detected = 0, windows = 0;
  for (const auto &b : val) {
    // BUG(torch-non-blocking-pageable): validation windows come from torch::randn, never pinned.
    auto x = b.waves.to(cfg.device, /*non_blocking=*/true);
    auto prob = torch::sigmoid(net->forward(x));
    StationPeaks sp{b.station, std::get<0>(prob.max(1)).to(torch::kCPU, /*non_blocking=*/true)};
    // BUG(torch-non-blocking-d2h-race): the comparison reads the host copy unsynchronised.
    detected += (sp.peak > cfg.pick_threshold).sum().item<int64_t>();
    windows += b.waves.size(0);
    peaks.push_back(sp);
  }
  if (cfg.device.is_cuda())
    torch::cuda::synchronize();
  std::cout << "  val recall " << static_cast<double>(detected) / static_cast<double>(windows) << '\n';
  return peaks;
}

// Declares an event for a window index when enough stations pick it.
int64_t associate(const std::vector<StationPeaks> &peaks, const RunConfig &cfg) {
  int64_t events = 0;
  for (int64_t w = 0; !peaks.empty() && w < peaks.front().peak.size(0); ++w) {
    int64_t votes = 0;
    for (const auto &sp : peaks)
      // OK(torch-non-blocking-d2h-race): validate() synchronised before returning the peaks.
      votes += sp.peak[w].item<float>() > cfg.pick_threshold ? 1 : 0;
    events += votes >= cfg.min_stations ? 1 : 0;
  }
  return events;
}

// Layer 1: the driver.
void fit(PickerNet net, const std::vector<WaveBatch> &train, const std::vector<WaveBatch> &val,
         const RunConfig &cfg) {
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(cfg.lr).weight_decay(1e-4));
  PickMetrics metrics(cfg.device);
  StepLogger logger(cfg.log_every);
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    net->train();
    metrics.reset();
    run_epoch(net, opt, train, cfg, metrics, logger, epoch);
    std::cout << "epoch " << epoch << " bce " << metrics.mean_loss() << " agreement " << metrics.agreement()
              << '\n';
    metrics.print_stations();
    auto peaks = validate(net, val, cfg);
    std::cout << "  associated events " << associate(peaks, cfg) << '\n';
  }
}

}  // namespace seis

int main(int argc, char **argv) {
  using namespace seis;
  torch::manual_seed(292);
  RunConfig cfg;
  cfg.device = pick_device();
  if (argc > 1)
    cfg.epochs = std::stoll(argv[1]);
  const std::vector<std::string> stations = {"PB.B045", "CI.PASC", "BK.CMB", "NC.KHBB", "UW.RATT"};
  std::vector<WaveBatch> train, val;
  for (uint64_t i = 0; i < 40; ++i) {
    auto b = synth_batch(cfg, stations[i % 4], 17 + i);
    if (cfg.device.is_cuda())
      b.waves = b.waves.pin_memory();
    train.push_back(std::move(b));
  }
  for (uint64_t i = 0; i < 5; ++i)
    val.push_back(synth_batch(cfg, stations[i], 900 + i));
  PickerNet net;
  net->to(cfg.device);
  fit(net, train, val, cfg);
  torch::save(net, "picker.pt");
}
