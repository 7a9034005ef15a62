// Accelerated knee MRI: a small U-Net removes the aliasing of 4x
// undersampled (zero-filled) reconstructions. A checkpoint pretrained on the
// public data set is fine-tuned on the site's own phantom scans, validated
// with SSIM/PSNR, and then reconstructs one volume. Split over five files:
// data.cpp simulates phantoms, masks and k-space and owns the device-side
// staging ring, model.cpp holds the network, checkpoint loading, coil maps
// and volume reconstruction, metrics.cpp the image metrics, train.cpp the
// fine-tuning and validation loops, main.cpp the run.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

constexpr int64_t kSide = 128;   // image and k-space side
constexpr int64_t kAccel = 4;    // undersampling factor
constexpr int64_t kAcs = 16;     // fully sampled low-frequency lines
constexpr int64_t kCoils = 4;
// Coil-sensitivity estimation runs on the second card of the reconstruction
// server, next to the network on the first.
// BUG(torch-device-index-unchecked): nothing compares this ordinal with
// torch::cuda::device_count(); estimate_coil_maps() (model.cpp) uses it on
// any machine with CUDA, also a one-GPU workstation.
constexpr int kCoilGpu = 1;

struct RunOptions {
  std::string checkpoint;  // empty: start from scratch
  int64_t finetune_steps = 400;
  int64_t batch = 8;
  double lr = 2e-4;
};

struct UNetLiteImpl : torch::nn::Module {
  explicit UNetLiteImpl(int64_t ch = 32);
  // zero-filled magnitude [B, 1, S, S] -> de-aliased magnitude, same shape
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Sequential down1{nullptr}, down2{nullptr}, bottom{nullptr}, up2{nullptr}, up1{nullptr};
  torch::nn::Conv2d out{nullptr};
};
TORCH_MODULE(UNetLite);

// A few preallocated device slots that host batches are copied into in turn.
class DeviceRing {
 public:
  DeviceRing(int64_t slots, int64_t batch, torch::Device device);
  // Starts the copy of host into the next slot and returns that slot.
  torch::Tensor stage(const torch::Tensor &host);

 private:
  std::vector<torch::Tensor> slots_;
  size_t next_ = 0;
};

// data.cpp
torch::Tensor phantom_batch(int64_t batch, uint64_t seed);    // [B, 1, S, S], host
torch::Tensor undersample_mask(uint64_t seed);                // [1, 1, 1, S], host
torch::Tensor zero_filled(const torch::Tensor &images, const torch::Tensor &mask);
torch::Tensor calibration_scan(uint64_t seed);                // [1, kCoils, S, S] complex k-space

// model.cpp
UNetLite load_pretrained(const std::string &path, torch::Device device);
torch::Tensor estimate_coil_maps(const torch::Tensor &kspace);
// Reconstructs a volume slice by slice, eight slices at a time; the result
// is on the host.
// BUG(torch-cuda-unguarded): main.cpp calls this without a device, so the
// default selects CUDA on every machine.
torch::Tensor reconstruct_volume(UNetLite &net, const torch::Tensor &slices, torch::Device device = torch::kCUDA);

// metrics.cpp
torch::Tensor ssim(const torch::Tensor &a, const torch::Tensor &b);
double psnr(const torch::Tensor &a, const torch::Tensor &b);

// train.cpp
void finetune(UNetLite &net, DeviceRing &inputs, DeviceRing &targets, const RunOptions &opts, torch::Device device);
double validate(UNetLite &net, torch::Device device, int64_t batches);
