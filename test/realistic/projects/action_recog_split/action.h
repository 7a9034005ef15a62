// Warehouse safety action recognition: a small (2+1)D convolutional network,
// pretrained on a public clip corpus, is fine-tuned on the site's twelve
// actions (lifting, reaching into racks, forklift crossing, ...). Split over
// six files: device.cpp picks the devices and warms up cuDNN, clips.cpp
// synthesises the clips and owns the clip source and the decoder-side
// resampling, model.cpp the network and its freezing helpers, metrics.cpp
// the meters, train.cpp the head warm-up and the fine-tuning epochs,
// evaluate.cpp the validation, the logit dump and the stream labelling,
// main.cpp the run.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

constexpr int64_t kFrames = 8;    // frames per clip seen by the network
constexpr int64_t kSide = 64;     // frame side after the crop
constexpr int64_t kClasses = 12;  // site actions

struct ClipBatch {
  torch::Tensor frames;  // [B, 3, kFrames, kSide, kSide] float
  torch::Tensor labels;  // [B] int64
};

struct FinetuneConfig {
  int64_t epochs = 6;
  int64_t steps_per_epoch = 240;
  int64_t warmup_steps = 60;
  int64_t batch = 8;
  int64_t accum = 4;  // micro-batches per optimizer step
  double lr = 3e-4;
  int64_t log_every = 40;
};

struct R2Plus1DImpl : torch::nn::Module {
  explicit R2Plus1DImpl(int64_t width = 32);
  // clip [B, 3, T, H, W] -> logits [B, kClasses]
  torch::Tensor forward(torch::Tensor clip);

  torch::nn::Sequential stem{nullptr}, block{nullptr};
  torch::nn::Dropout dropout{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(R2Plus1D);

// device.cpp
torch::Device training_device();
torch::Device decode_device();
void warm_up_conv3d(int64_t batch);

// clips.cpp
// Synthetic labelled clips in host memory; next() is pageable, next_pinned()
// page-locked (only valid on a CUDA machine).
class ClipSource {
 public:
  ClipSource(int64_t batch, uint64_t seed);
  ClipBatch next();
  ClipBatch next_pinned();

 private:
  int64_t batch_;
  uint64_t seed_;
  uint64_t drawn_ = 0;
};
// A long camera stream [3, T, kSide, kSide] at twice the training frame rate.
torch::Tensor synth_stream(int64_t clips, uint64_t seed);
// Temporal resampling of a raw window to kFrames on the decoder card; the
// result is back on the host.
torch::Tensor resample_clip(const torch::Tensor &raw);

// model.cpp
R2Plus1D build_model(const std::string &checkpoint, torch::Device device);
void set_backbone_trainable(R2Plus1D &net, bool trainable);

// metrics.cpp
class Top1Meter {
 public:
  void update(const torch::Tensor &logits, const torch::Tensor &labels);
  double value() const;

 private:
  int64_t correct_ = 0, seen_ = 0;
};
class StepLogger {
 public:
  explicit StepLogger(int64_t every) : every_(every) {}
  void maybe_log(int64_t step, const torch::Tensor &loss);

 private:
  int64_t every_;
};
class ConfusionMatrix {
 public:
  ConfusionMatrix();
  void add(const torch::Tensor &preds, const torch::Tensor &labels);
  double accuracy() const;

 private:
  torch::Tensor counts_;  // [kClasses, kClasses] int64, host
};

// train.cpp
void warmup_head(R2Plus1D &net, const FinetuneConfig &cfg, torch::Device device);
double train_epoch(R2Plus1D &net, torch::optim::Optimizer &opt, ClipSource &source, const FinetuneConfig &cfg,
                   torch::Device device, int64_t epoch);

// evaluate.cpp
double evaluate(R2Plus1D &net, torch::Device device, int64_t batches, uint64_t seed);
void dump_val_logits(R2Plus1D &net, torch::Device device, int64_t batches, const std::string &path);
std::vector<int64_t> label_stream(R2Plus1D &net, const torch::Tensor &stream, torch::Device device);
