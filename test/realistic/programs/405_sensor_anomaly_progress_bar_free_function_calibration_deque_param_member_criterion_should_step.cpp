// Anomaly detection on multivariate sensor streams (pumps in a water plant):
// a GRU autoencoder reconstructs 64-step windows of 12 channels, trained on
// normal operation only. The trainer accumulates micro-batches (one per pump),
// shows a console progress bar, keeps a moving window of recent losses for a
// plateau test, and collects the per-window reconstruction errors that set the
// alarm threshold at the 99th percentile.
#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;

namespace ui {

// One console line: "[=====     ] 123/400 loss 0.0123".
void render_bar(int64_t step, int64_t total, const torch::Tensor &loss) {
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * (step + 1) / total);
  std::ostringstream line;
  line << '\r' << '[' << std::string(filled, '=') << std::string(kWidth - filled, ' ') << "] " << step + 1 << '/' << total;
  // BUG(torch-host-sync-in-loop): the training loop calls the bar on every step; the loss is read back to the host each time.
  line << " loss " << std::setprecision(4) << loss.item<float>();
  std::cout << line.str() << std::flush;
}

}  // namespace ui

namespace anomaly {

constexpr int64_t kChannels = 12, kWindow = 64, kHidden = 48, kPumps = 6;

struct GruAutoencoderImpl : nn::Module {
  GruAutoencoderImpl()
      : enc(register_module("enc", nn::GRU(nn::GRUOptions(kChannels, kHidden).batch_first(true)))),
        drop(register_module("drop", nn::Dropout(0.2))),
        dec(register_module("dec", nn::GRU(nn::GRUOptions(kHidden, kHidden).batch_first(true)))),
        out(register_module("out", nn::Linear(kHidden, kChannels))) {}

  torch::Tensor forward(const torch::Tensor &x) {  // B x T x C
    auto code = std::get<1>(enc->forward(x)).squeeze(0);  // B x H
    auto rep = drop(code).unsqueeze(1).expand({-1, x.size(1), -1}).contiguous();
    return out(std::get<0>(dec->forward(rep)));
  }

  nn::GRU enc;
  nn::Dropout drop;
  nn::GRU dec;
  nn::Linear out;
};
TORCH_MODULE(GruAutoencoder);

// Normal operation of one pump: a few harmonics plus sensor noise.
torch::Tensor pump_windows(int64_t pump, int64_t b) {
  auto t = torch::arange(kWindow, torch::kFloat).view({1, kWindow, 1});
  auto phase = torch::rand({b, 1, kChannels}) * 6.28;
  auto freq = 0.05 + 0.01 * static_cast<double>(pump);
  return torch::sin(t * freq + phase) + 0.05 * torch::randn({b, kWindow, kChannels});
}

// The window a dashboard thread redraws; it only ever holds the latest one.
class LivePlot {
 public:
  void set_latest(torch::Tensor window) { latest_ = std::move(window); }
  const torch::Tensor &latest() const { return latest_; }

 private:
  torch::Tensor latest_;
};

class ReconTrainer {
 public:
  ReconTrainer(GruAutoencoder model, torch::Device device, int64_t accum)
      : model_(std::move(model)), device_(device), accum_(accum),
        opt_(model_->parameters(), torch::optim::AdamOptions(1e-3)),
        loss_ema_(torch::zeros({}, torch::TensorOptions().device(device))) {
    model_->to(device_);
  }

  // One epoch; per-window errors of the last epoch go to 'calibration'.
  double train_epoch(int64_t rounds, int64_t batch, std::deque<torch::Tensor> &calibration) {
    model_->train();
    opt_.zero_grad();
    const int64_t total = rounds * kPumps;
    int64_t step = 0;
    for (int64_t r = 0; r < rounds; ++r) {
      for (int64_t pump = 0; pump < kPumps; ++pump, ++step) {
        auto x = pump_windows(pump, batch).to(device_);
        auto recon = model_->forward(x);
        auto loss = criterion_(recon, x);
        backprop(loss);
        if (should_step()) {
          opt_.step();
          opt_.zero_grad();
        }
        ui::render_bar(step, total, loss);
        // BUG(torch-loss-accumulation-graph): the loss EMA is a member tensor updated with the live loss, so it chains every step's graph.
        loss_ema_ += 0.02 * (loss - loss_ema_);
        // BUG(torch-host-sync-in-loop): the first reconstructed window is copied to the host on every step for the live plot.
        plot_.set_latest(recon.select(0, 0).detach().to(torch::kCPU));
        // BUG(torch-loss-accumulation-graph): per-window errors are computed from the live reconstruction and kept in the caller's deque for the whole epoch.
        calibration.push_back((recon - x).pow(2).mean({1, 2}));
        // OK(torch-loss-accumulation-graph): the plateau window keeps detached values only.
        recent_.push_back(loss.detach());
        if (static_cast<int64_t>(recent_.size()) > kPlateauWindow) recent_.pop_front();
      }
    }
    std::cout << '\n';
    // OK(torch-host-sync-in-loop): one read per epoch, after the loop.
    return torch::stack(std::vector<torch::Tensor>(recent_.begin(), recent_.end())).mean().item<double>();
  }

  torch::Tensor score(const torch::Tensor &windows) {
    torch::NoGradGuard no_grad;
    model_->eval();
    auto x = windows.to(device_);
    return (model_->forward(x) - x).pow(2).mean({1, 2});
  }

  torch::Device device() const { return device_; }
  const torch::Tensor &loss_ema() const { return loss_ema_; }

 private:
  void backprop(const torch::Tensor &loss) {
    // BUG(torch-grad-accumulation-unscaled): the member MSELoss reduces by the mean and the loss is never divided by accum_, while step() waits for accum_ pumps.
    loss.backward();
  }
  bool should_step() { return ++micro_ % accum_ == 0; }

  static constexpr int64_t kPlateauWindow = 50;
  GruAutoencoder model_;
  torch::Device device_;
  int64_t accum_;
  int64_t micro_ = 0;
  nn::MSELoss criterion_;
  torch::optim::Adam opt_;
  std::deque<torch::Tensor> recent_;
  torch::Tensor loss_ema_;
  LivePlot plot_;
};

// Scores held-out windows with injected faults (stuck sensors, spikes).
struct Evaluation {
  double threshold = 0.0;
  double recall = 0.0;
  double false_alarm = 0.0;
};

Evaluation evaluate(ReconTrainer &trainer, const torch::Tensor &threshold) {
  std::vector<torch::Tensor> normal, faulty;
  for (int64_t pump = 0; pump < kPumps; ++pump) {
    auto clean = pump_windows(pump, 32);
    auto broken = clean.clone();
    broken.narrow(2, pump, 1).fill_(0.8);  // one channel stuck
    broken.narrow(1, 20, 4).mul_(4.0);     // and a spike
    // OK(torch-loss-accumulation-graph): the scores are computed under the scorer's no-grad guard.
    normal.push_back(trainer.score(clean));
    faulty.push_back(trainer.score(broken));
  }
  auto thr = threshold.to(trainer.device());
  auto normal_scores = torch::cat(normal), faulty_scores = torch::cat(faulty);
  Evaluation e;
  e.threshold = threshold.item<double>();
  e.recall = (faulty_scores > thr).to(torch::kFloat).mean().item<double>();
  e.false_alarm = (normal_scores > thr).to(torch::kFloat).mean().item<double>();
  return e;
}

}  // namespace anomaly

int main() {
  using namespace anomaly;
  torch::manual_seed(405);
  // OK(torch-cuda-unguarded): the device is chosen by the runtime check.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  ReconTrainer trainer(GruAutoencoder(), device, /*accum=*/kPumps);
  torch::Tensor threshold;
  for (int epoch = 0; epoch < 5; ++epoch) {
    std::deque<torch::Tensor> calibration;
    const double plateau = trainer.train_epoch(/*rounds=*/40, /*batch=*/16, calibration);
    auto errors = torch::cat(std::vector<torch::Tensor>(calibration.begin(), calibration.end())).detach();
    threshold = torch::quantile(errors.to(torch::kFloat).cpu(), 0.99);
    std::cout << "epoch " << epoch << " recent loss " << plateau << " ema " << trainer.loss_ema().item<double>() << " threshold " << threshold.item<double>() << '\n';
  }
  auto e = evaluate(trainer, threshold);
  std::cout << "threshold " << e.threshold << " recall " << e.recall << " false alarms " << e.false_alarm << '\n';
  return 0;
}
