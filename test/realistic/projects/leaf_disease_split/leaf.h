// Crop disease triage for a growers' cooperative: a small CNN labels 64x64
// leaf crops (cut from the photos that growers take with the scouting app)
// as healthy or one of five diseases, so that an agronomist sees the likely
// outbreaks first. An exponential moving average of the weights is what
// ships to the app. Split over four files: data.cpp renders the synthetic
// leaf crops and uploads batches, model.cpp holds the network, its factory
// and the EMA and mode helpers, metrics.cpp the loss, the meters, the step
// logger and the field report, train.cpp the training and validation loops
// and main().
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

constexpr int64_t kSide = 64;
constexpr int64_t kClasses = 6;  // healthy, rust, early blight, mildew, mosaic, scab

// Relative cost of a missed diagnosis per class, from the agronomists:
// a missed blight loses a field, a missed scab a few fruit.
constexpr std::array<double, kClasses> kMissCost = {1.0, 2.5, 4.0, 2.0, 3.0, 1.5};

struct TrainConfig {
  int64_t epochs = 12;
  int64_t steps_per_epoch = 150;
  int64_t batch = 32;
  int64_t width = 32;
  double dropout = 0.3;
  double lr = 1e-3;
  double ema_decay = 0.995;
  int64_t log_every = 25;
  int64_t val_every = 2;
  std::string out = "leafnet_ema.pt";
};

struct LeafBatch {
  torch::Tensor images;  // [B, 3, S, S] float, host
  torch::Tensor labels;  // [B] int64, host
};

struct LeafNetImpl : torch::nn::Module {
  LeafNetImpl(int64_t width, double dropout);
  torch::Tensor forward(torch::Tensor x);  // [B, 3, S, S] -> logits [B, kClasses]

  torch::nn::Sequential stem{nullptr}, body{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(LeafNet);

// Renders batches of leaf crops; with pin set, the images are rendered
// straight into page-locked memory.
class LeafSource {
 public:
  LeafSource(uint64_t seed, int64_t batch, bool pin);
  LeafBatch next();

 private:
  at::Generator gen_;
  int64_t batch_;
  bool pin_;
};

// data.cpp
std::vector<LeafBatch> holdout_chunks(int64_t chunks, uint64_t seed);
LeafBatch field_photos(uint64_t seed);
torch::Tensor class_weights();  // [kClasses], host
// Starts the copy of a host tensor to the device and returns the copy.
torch::Tensor upload(const torch::Tensor &host, torch::Device device);

// model.cpp
LeafNet make_leafnet(const TrainConfig &cfg, torch::Device device);
void ema_update(LeafNet &ema, const LeafNet &net, double decay);
void freeze(LeafNet &net);
