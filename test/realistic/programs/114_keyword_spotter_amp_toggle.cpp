// Keyword spotting on synthetic 40-band log-mel clips: a 1-D conv net with
// BatchNorm and Dropout. Mixed precision is switched through an AmpToggle
// object with begin()/end() methods (it also counts the regions for the
// profiler log) instead of an RAII guard. CUDA autocast runs in float16 by
// default here and LibTorch has no GradScaler, so the recipe scales each
// loss by hand and unscales the gradients before the step.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kBands = 40;
constexpr int64_t kFrames = 32;
constexpr int64_t kWords = 8;
constexpr double kLossScale = 1024.0;

class AmpToggle {
public:
  void begin() {
    ++regions_;
#if TORCH_VERSION_MAJOR >= 2
    // OK(torch-autocast-region): no early exit; every caller pairs it with end().
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    // OK(torch-autocast-region): no early exit; every caller pairs it with end().
    at::autocast::set_enabled(true);
#endif
  }
  void end() {
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_enabled(at::kCUDA, false);
#else
    at::autocast::set_enabled(false);
#endif
    at::autocast::clear_cache();
  }
  int64_t regions() const { return regions_; }

private:
  int64_t regions_ = 0;
};

struct KwsNetImpl : torch::nn::Module {
  KwsNetImpl()
      : features(register_module(
            "features", torch::nn::Sequential(torch::nn::Conv1d(torch::nn::Conv1dOptions(kBands, 64, 5).padding(2)),
                                              torch::nn::BatchNorm1d(64), torch::nn::ReLU(), torch::nn::Dropout(0.1),
                                              torch::nn::Conv1d(torch::nn::Conv1dOptions(64, 64, 3).padding(1)),
                                              torch::nn::ReLU(), torch::nn::AdaptiveAvgPool1d(1),
                                              torch::nn::Flatten()))),
        head(register_module("head", torch::nn::Linear(64, kWords))) {}
  torch::Tensor forward(torch::Tensor mel) { return head(features->forward(mel)); }
  torch::nn::Sequential features;
  torch::nn::Linear head;
};
TORCH_MODULE(KwsNet);

struct Clip {
  torch::Tensor mel, words;
};

// Each keyword lights up its own band pattern; `accent` shifts the bands.
std::vector<Clip> synth_clips(int64_t batches, int64_t n, int64_t accent, torch::Device device) {
  auto pattern = torch::randn({kWords, kBands, 1}, torch::TensorOptions().device(device)).roll(accent, 1);
  std::vector<Clip> clips;
  for (int64_t b = 0; b < batches; ++b) {
    auto words = torch::randint(kWords, {n}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto mel = pattern.index_select(0, words) + 0.7 * torch::randn({n, kBands, kFrames}, device);
    clips.push_back({mel, words});
  }
  return clips;
}

void unscale(const std::vector<torch::Tensor> &params, double scale) {
  for (const auto &p : params)
    if (p.grad().defined())
      p.grad().div_(scale);
}

void train_epoch(KwsNet &net, torch::optim::Optimizer &opt, AmpToggle &amp, const std::vector<Clip> &clips) {
  net->train();
  for (const auto &clip : clips) {
    opt.zero_grad();
    amp.begin();
    auto loss = torch::nn::functional::cross_entropy(net->forward(clip.mel), clip.words);
    amp.end();
    // OK(torch-autocast-region): the region is closed and the loss is scaled.
    (loss * kLossScale).backward();
    unscale(net->parameters(), kLossScale);
    opt.step();
  }
}

// Large effective batches for the final epochs, accumulated in fp16.
void train_accumulated(KwsNet &net, AmpToggle &amp, const std::vector<Clip> &clips, int64_t accum) {
  net->train();
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(5e-4));
  opt.zero_grad();
  int64_t micro = 0;
  for (const auto &clip : clips) {
    amp.begin();
    auto loss = torch::nn::functional::cross_entropy(net->forward(clip.mel), clip.words);
    // BUG(torch-autocast-region): backward() runs before amp.end(), inside
    // the autocast region; PyTorch runs backward outside autocast.
    // OK(torch-grad-accumulation-unscaled): the scale folds in 1/accum.
    (loss * (kLossScale / static_cast<double>(accum))).backward();
    amp.end();
    if (++micro % accum == 0) {
      unscale(net->parameters(), kLossScale);
      opt.step();
      opt.zero_grad();
    }
  }
}

// Adapts the classifier head to one speaker's accent.
void adapt_speaker(KwsNet &net, AmpToggle &amp, const std::vector<Clip> &clips, int epochs) {
  net->train();
  torch::optim::SGD opt(net->head->parameters(), torch::optim::SGDOptions(1e-2));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (const auto &clip : clips) {
      opt.zero_grad();
      amp.begin();
      auto logits = net->forward(clip.mel);
      auto loss = torch::nn::functional::cross_entropy(logits, clip.words);
      amp.end();
      // BUG(torch-autocast-region): the loss comes from a float16 region (no
      // dtype was set) and reaches backward() unscaled: the head's small
      // gradients underflow to zero.
      loss.backward();
      // OK(torch-missing-zero-grad): zero_grad() at the top of every clip.
      opt.step();
    }
  }
}

double accuracy(KwsNet &net, AmpToggle &amp, const std::vector<Clip> &clips) {
  torch::NoGradGuard no_grad;
  int64_t correct = 0, seen = 0;
  amp.begin();
  for (const auto &clip : clips) {
    // OK(torch-eval-mode-missing): every caller calls net->eval() first.
    correct += net->forward(clip.mel).argmax(1).eq(clip.words).sum().item<int64_t>();
    seen += clip.words.size(0);
  }
  amp.end();
  return static_cast<double>(correct) / static_cast<double>(seen);
}

// Returns the spotted keyword, or -1 when no word is confident enough.
int64_t spot(KwsNet &net, const torch::Tensor &mel, double threshold) {
  torch::NoGradGuard no_grad;
  // BUG(torch-autocast-region): the early return for an unconfident clip
  // skips the switch-off below and leaves the whole thread in float16.
  at::autocast::set_enabled(true);
  // OK(torch-eval-mode-missing): main() calls eval() before serving.
  auto probs = torch::softmax(net->forward(mel.unsqueeze(0)).to(torch::kFloat), 1);
  auto best = probs.max(1);
  if (std::get<0>(best).item<double>() < threshold)
    return -1;
  at::autocast::set_enabled(false);
  at::autocast::clear_cache();
  return std::get<1>(best).item<int64_t>();
}

int main() {
  torch::manual_seed(114);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  KwsNet net;
  net->to(device);
  AmpToggle amp;
  auto train = synth_clips(64, 32, 0, device), val = synth_clips(8, 128, 0, device);

  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  for (int epoch = 0; epoch < 6; ++epoch) {
    train_epoch(net, opt, amp, train);
    net->eval();
    std::cout << "epoch " << epoch << " val acc " << accuracy(net, amp, val) << '\n';
  }
  train_accumulated(net, amp, train, 4);
  adapt_speaker(net, amp, synth_clips(8, 16, 3, device), 5);
  net->eval();
  std::cout << "speaker acc " << accuracy(net, amp, synth_clips(4, 64, 3, device)) << " regions "
            << amp.regions() << '\n';

  for (const auto &clip : synth_clips(1, 4, 3, device)) {
    for (int64_t i = 0; i < clip.mel.size(0); ++i)
      std::cout << "request " << i << " -> " << spot(net, clip.mel[i], 0.6) << '\n';
  }
}
