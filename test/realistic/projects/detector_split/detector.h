// A single-stage object detector for 64x64 crops (six classes and one box per
// crop), split over four files: data.cpp stages host batches and anchors,
// engine.cpp holds the model and the runtime helpers (device, gradients,
// memory, meters, GPU benchmarks), train.cpp trains, scores and predicts,
// main.cpp wires them together.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

constexpr int64_t kClasses = 6;
constexpr int64_t kImage = 64;

struct DetectorImpl : torch::nn::Module {
  DetectorImpl();
  // images [B, 3, 64, 64] -> [B, kClasses + 4]: class logits, then the box
  // offsets (cx, cy, w, h) relative to the crop's anchor.
  torch::Tensor forward(torch::Tensor images);

  torch::nn::Sequential backbone{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Detector);

// Host-side staging buffers, refilled in place for every batch.
struct StagingArea {
  torch::Tensor images;  // [B, 3, 64, 64]
  torch::Tensor boxes;   // [B, 4]
  torch::Tensor labels;  // [B]
};

struct TrainConfig {
  int64_t batch = 32;
  int64_t epochs = 4;
  int64_t steps_per_epoch = 50;
};

// data.cpp
StagingArea make_staging(int64_t batch);
StagingArea make_pinned_staging(int64_t batch);
void fill_synthetic(StagingArea &area, int64_t seed);
torch::Tensor make_anchors(int64_t batch);
torch::Tensor upload(const torch::Tensor &host, torch::Device device);

// engine.cpp
torch::Device pick_device();
void enable_fast_kernels();
double gpu_matmul_tflops();
void clear_grads(torch::optim::Optimizer &opt);
void compact_allocator();
void freeze(Detector &det);
torch::Tensor run_detector(Detector &det, const torch::Tensor &images);

class LossMeter {
 public:
  void update(const torch::Tensor &loss);
  double mean() const { return count_ == 0 ? 0.0 : sum_ / static_cast<double>(count_); }
  void reset() { sum_ = 0; count_ = 0; }

 private:
  double sum_ = 0;
  int64_t count_ = 0;
};

// Keeps every step's loss for the learning-curve plot written after training.
class EpochLog {
 public:
  void record(const torch::Tensor &loss);
  std::vector<double> curve() const;

 private:
  std::vector<torch::Tensor> losses_;
};

// train.cpp
void train_detector(Detector &det, torch::optim::Optimizer &opt, torch::Device device,
                    const TrainConfig &cfg, EpochLog &log);
double evaluate_accuracy(Detector &det, torch::Device device, int64_t batches);
torch::Tensor predict_tiles(Detector &det, const torch::Tensor &tiles);
