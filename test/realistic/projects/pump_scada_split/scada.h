// Anomaly detection for a water utility's pumping stations. A 1-D
// convolutional autoencoder learns one-hour windows of healthy operation
// (motor current, discharge pressure, flow, bearing and winding
// temperatures, vibration, ...) and a window it cannot reconstruct is handed
// to the maintenance crew. Split over five files: env.cpp picks the device
// once and times the run, data.cpp reads (here: synthesises) the historian
// windows, model.cpp holds the network and its trainer, score.cpp calibrates
// the alarm threshold and scores, main.cpp runs one night of the fleet.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

constexpr int64_t kChannels = 10;
constexpr int64_t kWindow = 60;     // one-minute samples
constexpr int64_t kBearingTemp = 4; // channel index of the drive-end bearing

// Process-wide runtime, filled once by Env::init() before anything is built.
class Env {
 public:
  static void init(uint64_t seed);
  static torch::Device device();
  static bool has_cuda();
};

// Wall time of the GPU work since construction or the last lap().
class StepTimer {
 public:
  StepTimer();
  double lap();

 private:
  std::chrono::steady_clock::time_point start_;
};

struct PumpAutoencoderImpl : torch::nn::Module {
  PumpAutoencoderImpl();
  // x [B, kChannels, kWindow] -> reconstruction of the same shape
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Sequential encoder{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::Sequential decoder{nullptr};
};
TORCH_MODULE(PumpAutoencoder);

// One batch of windows from the historian, on the host.
struct WindowBatch {
  torch::Tensor values;   // [B, kChannels, kWindow], standardised
  torch::Tensor healthy;  // [B] uint8, 1 when the work-order log shows no fault
};

class HistorianFeed {
 public:
  HistorianFeed(int64_t stations, int64_t batch, uint64_t seed);
  WindowBatch next();

 private:
  std::vector<float> raw_;
  std::vector<uint8_t> flags_;
  int64_t stations_, batch_, cursor_ = 0;
  std::mt19937 rng_;
};

class Trainer {
 public:
  Trainer(PumpAutoencoder model, double lr);
  void fit(HistorianFeed &feed, int64_t steps);
  PumpAutoencoder model() const { return model_; }

 private:
  PumpAutoencoder model_;
  torch::optim::AdamW opt_;
};

struct AnomalyReport {
  torch::Tensor errors;  // [B] mean squared reconstruction error, host
  torch::Tensor alarms;  // [B] bool, host
};

// data.cpp
torch::Tensor healthy_reference(int64_t n, uint64_t seed);

// score.cpp
bool loss_diverged(const torch::Tensor &loss);
double calibrate_threshold(PumpAutoencoder net, double quantile);
AnomalyReport score_windows(PumpAutoencoder net, const WindowBatch &batch, double threshold);
