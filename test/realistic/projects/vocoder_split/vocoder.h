// A small neural vocoder (mel spectrogram -> waveform, 64 samples per frame)
// split over four files: audio.cpp owns the host buffers and the signal
// helpers, model.cpp the generator and the runtime helpers (modes, gradients,
// memory, progress), train.cpp the pre-training and speaker fine-tuning loops,
// main.cpp the synthesis and the run itself.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

constexpr int64_t kMels = 80;
constexpr int64_t kHop = 64;      // samples per mel frame
constexpr int64_t kFrame = 256;   // analysis window of the spectral loss
constexpr int64_t kAccum = 4;     // micro-batches per optimizer step
constexpr double kSampleRate = 16000.0;

struct GeneratorImpl : torch::nn::Module {
  GeneratorImpl();
  // mel [B, 80, T] -> waveform [B, 1, 64 * T]
  torch::Tensor forward(torch::Tensor mel);

  torch::nn::Conv1d pre{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
  torch::nn::ConvTranspose1d up1{nullptr}, up2{nullptr};
  torch::nn::Conv1d post{nullptr};
};
TORCH_MODULE(Generator);

// Host buffers for one micro-batch, refilled in place by the feature
// extractor; the mel side is page-locked for the asynchronous upload.
class MelBatcher {
 public:
  MelBatcher(int64_t batch, int64_t frames);
  void refill(int64_t seed);
  const torch::Tensor &mels() const { return mels_; }
  const torch::Tensor &audio() const { return audio_; }

 private:
  torch::Tensor mels_;   // [B, 80, T]
  torch::Tensor audio_;  // [B, 1, 64 * T]
};

struct RuntimeInfo {
  bool has_cuda = false;
  int64_t devices = 0;
};

// audio.cpp
torch::Tensor reference_mels(int64_t frames);
torch::Tensor mel_filterbank();
torch::Tensor spectral_l1(const torch::Tensor &fake, const torch::Tensor &real, const torch::Tensor &window);
torch::Tensor download_async(const torch::Tensor &wave);
torch::Tensor as_half(const torch::Tensor &wave);

// model.cpp
RuntimeInfo probe_runtime();
void warm_up_conv_kernels();
void set_training(Generator &gen);
void prepare_for_synthesis(Generator &gen);
void zero_all(torch::optim::Optimizer &opt);
void release_activations();

class Progress {
 public:
  Progress(std::string name, int64_t every) : name_(std::move(name)), every_(every) {}
  void tick(int64_t step, const torch::Tensor &loss);

 private:
  std::string name_;
  int64_t every_;
};

// train.cpp
void train_vocoder(Generator &gen, MelBatcher &batcher, torch::Device device, int64_t steps);
void finetune_on_speaker(Generator &gen, MelBatcher &batcher, torch::Device device, int64_t steps);
