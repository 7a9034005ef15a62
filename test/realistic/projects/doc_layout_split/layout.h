// Page layout analysis for a records-digitisation line: each scanned page,
// downsampled to a 128x96 raster, is segmented pixel by pixel into
// background, body text, table, figure and margin note, so that the OCR
// stage only reads text regions and the table extractor only tables. A small
// dilated fully convolutional network is fine-tuned on synthetic pages with
// gradient accumulation, validated every epoch, calibrated for the human
// review queue, and then segments one bound volume. Split over seven files:
// runtime.cpp picks the device and owns the GPU memory helpers, pages.cpp
// renders pages into host buffers and writes the masks, model.cpp holds the
// network and its placement, metrics.cpp the loss and the meters, train.cpp
// the fine-tuning epoch, evaluate.cpp validation, calibration and export,
// main.cpp the run.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

constexpr int64_t kPageH = 128;
constexpr int64_t kPageW = 96;
constexpr int64_t kRegions = 5;  // background, text, table, figure, margin note

struct LayoutConfig {
  int64_t epochs = 5;
  int64_t steps_per_epoch = 320;
  int64_t micro_batch = 6;
  int64_t accum = 4;  // micro-batches per optimizer step
  double lr = 1e-3;
  int64_t log_every = 80;
  int64_t val_batches = 12;
};

struct LayoutNetImpl : torch::nn::Module {
  explicit LayoutNetImpl(int64_t width = 24);
  // pages [B, 1, H, W] in [0, 1] -> region logits [B, kRegions, H, W]
  torch::Tensor forward(torch::Tensor pages);

  torch::nn::Sequential encoder{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::Conv2d classifier{nullptr};
};
TORCH_MODULE(LayoutNet);

// runtime.cpp
torch::Device choose_device();
void trim_gpu_memory(const std::string &phase);
// One forward over a whole volume; on out-of-memory it tries once more.
torch::Tensor segment_volume(LayoutNet &net, const torch::Tensor &pages);

// pages.cpp
torch::Tensor page_buffer(int64_t batch);         // [B, 1, H, W] float, pageable host memory
torch::Tensor pinned_page_buffer(int64_t batch);  // the same, page-locked: CUDA machines only
// Renders `pixels.size(0)` synthetic pages into `pixels` and returns their
// region labels [B, H, W] int64 on the host.
torch::Tensor render_pages(torch::Tensor &pixels, uint64_t seed);
// Writes one PGM per page of a host uint8 mask batch [B, H, W].
void save_mask_pgms(const torch::Tensor &masks, const std::string &prefix);

// model.cpp
LayoutNet build_layout_net(int64_t width, const std::string &checkpoint);
void place_module(torch::nn::Module &module, torch::Device device, const std::string &name);

// metrics.cpp
torch::Tensor layout_loss(const torch::Tensor &logits, const torch::Tensor &labels);
double pixel_accuracy(const torch::Tensor &logits, const torch::Tensor &labels);
void add_to_epoch_loss(torch::Tensor &epoch_loss, const torch::Tensor &loss);

// Counts micro-batches; tick() is true on the one that completes a window.
class MicroBatchClock {
 public:
  explicit MicroBatchClock(int64_t window);
  bool tick();

 private:
  int64_t window_;
  int64_t seen_ = 0;
};

// Detached recent losses for the progress line.
class LossWindow {
 public:
  void push(const torch::Tensor &loss);
  double mean_and_reset();

 private:
  std::vector<torch::Tensor> values_;
};

// train.cpp
double train_epoch(LayoutNet &net, torch::optim::Optimizer &opt, const LayoutConfig &cfg, torch::Device device,
                   int64_t epoch);

// evaluate.cpp
double validate(LayoutNet &net, torch::Device device, int64_t batches);
double low_confidence_fraction(LayoutNet &net, torch::Device device, int64_t batches, double threshold);
void export_volume_masks(LayoutNet &net, torch::Device device, const std::string &prefix);
