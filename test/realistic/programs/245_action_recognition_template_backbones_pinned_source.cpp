// Action recognition on short warehouse-camera clips (8 frames of 32x32):
// a factorised (2+1)D convolution backbone against a frame-averaging
// baseline, both trained by one templated epoch loop with gradient
// accumulation. Training clips come from a source that decodes into pinned
// buffers; evaluation decodes the test clips one by one. Rare actions are
// replayed afterwards to fit a new head on the frozen (2+1)D features.
#include <torch/torch.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kFrames = 8, kSide = 32, kActions = 6, kWidth = 32;

struct VideoTrainConfig {
  int64_t accum = 4, steps = 200, batch = 8;
  double lr = 1e-3;
};

struct R2Plus1DImpl : torch::nn::Module {
  R2Plus1DImpl()
      : spatial(register_module(
            "spatial", torch::nn::Conv3d(torch::nn::Conv3dOptions(3, kWidth, {1, 3, 3}).padding({0, 1, 1})))),
        temporal(register_module(
            "temporal", torch::nn::Conv3d(torch::nn::Conv3dOptions(kWidth, kWidth, {3, 1, 1}).padding({1, 0, 0})))),
        bn(register_module("bn", torch::nn::BatchNorm3d(kWidth))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        fc(register_module("fc", torch::nn::Linear(kWidth, kActions))) {}

  // clips [B, 3, T, H, W] -> pooled features [B, kWidth]
  torch::Tensor features(const torch::Tensor &clips) {
    auto h = torch::relu(bn->forward(temporal->forward(torch::relu(spatial->forward(clips)))));
    return h.mean({2, 3, 4});
  }
  torch::Tensor forward(const torch::Tensor &clips) { return fc->forward(drop->forward(features(clips))); }

  torch::nn::Conv3d spatial, temporal;
  torch::nn::BatchNorm3d bn;
  torch::nn::Dropout drop;
  torch::nn::Linear fc;
};
TORCH_MODULE(R2Plus1D);

struct FrameAverageImpl : torch::nn::Module {
  FrameAverageImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, kWidth, 3).padding(1)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(kWidth))),
        fc(register_module("fc", torch::nn::Linear(kWidth, kActions))) {}
  torch::Tensor forward(const torch::Tensor &clips) {
    return fc->forward(torch::relu(bn->forward(conv->forward(clips.mean(2)))).mean({2, 3}));
  }
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
  torch::nn::Linear fc;
};
TORCH_MODULE(FrameAverage);

struct ClipBatch {
  torch::Tensor frames;  // [B, 3, T, H, W] float
  torch::Tensor labels;  // [B] int64
};

// Stand-in for the video decoder: an RGB24 buffer with a moving bar whose
// speed encodes the action.
torch::Tensor decode_clip(std::mt19937 &rng, int64_t action) {
  std::vector<uint8_t> rgb(static_cast<size_t>(kFrames * kSide * kSide * 3));
  const int64_t offset = static_cast<int64_t>(rng() % kSide);
  for (int64_t t = 0; t < kFrames; ++t)
    for (int64_t y = 0; y < kSide; ++y) {
      const int64_t x = (offset + t * (action + 1)) % kSide;
      rgb[static_cast<size_t>(((t * kSide + y) * kSide + x) * 3 + (action % 3))] = 255;
    }
  auto hwc = torch::from_blob(rgb.data(), {1, kFrames, kSide, kSide, 3}, torch::kUInt8);
  return hwc.permute({0, 4, 1, 2, 3}).to(torch::kFloat).div(255.0);
}

// Decodes whole batches straight into page-locked buffers.
class PinnedClipSource {
 public:
  PinnedClipSource(int64_t batch, uint32_t seed) : batch_(batch), rng_(seed) {}
  ClipBatch next() {
    auto opts = torch::TensorOptions().pinned_memory(true);
    ClipBatch out{torch::empty({batch_, 3, kFrames, kSide, kSide}, opts),
                  torch::empty({batch_}, opts.dtype(torch::kLong))};
    for (int64_t b = 0; b < batch_; ++b) {
      const int64_t action = static_cast<int64_t>(rng_() % kActions);
      out.frames[b].copy_(decode_clip(rng_, action)[0]);
      out.labels[b] = action;
    }
    return out;
  }
 private:
  int64_t batch_;
  std::mt19937 rng_;
};

torch::Tensor to_device_async(const torch::Tensor &host, torch::Device d) { return host.to(d, /*non_blocking=*/true); }

template <typename Net>
void train_backbone(Net &net, torch::optim::Optimizer &opt, PinnedClipSource &source, const VideoTrainConfig &cfg,
                    torch::Device device) {
  net->train();
  opt.zero_grad();
  int64_t seen = 0;
  for (int64_t i = 0; i < cfg.steps * cfg.accum; ++i) {
    auto batch = source.next();
    // OK(torch-non-blocking-pageable): next() returns page-locked buffers.
    auto clips = to_device_async(batch.frames, device);
    auto labels = to_device_async(batch.labels, device);
    auto loss = F::cross_entropy(net->forward(clips), labels, F::CrossEntropyFuncOptions().label_smoothing(0.1));
    // BUG(torch-grad-accumulation-unscaled): cfg.accum mean losses add up
    // before each step, in both instantiations.
    loss.backward();
    if (++seen % cfg.accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}

void write_row(std::ofstream &out, const torch::Tensor &probs) {
  auto p = probs.accessor<float, 2>();
  for (int64_t a = 0; a < kActions; ++a)
    out << p[0][a] << (a + 1 < kActions ? ',' : '\n');
}

void score_test_clips(R2Plus1D &net, const std::vector<int64_t> &acts, torch::Device device, const std::string &csv) {
  torch::NoGradGuard no_grad;
  net->eval();
  std::mt19937 rng(7);
  std::vector<torch::Tensor> pending;
  for (const int64_t action : acts) {
    auto clip = decode_clip(rng, action);
    // BUG(torch-non-blocking-pageable): decode_clip() returns pageable
    // memory; to_device_async() copies it with non_blocking.
    auto on_device = to_device_async(clip, device);
    pending.push_back(F::softmax(net->forward(on_device), 1).to(torch::kCPU, /*non_blocking=*/true));
  }
  std::ofstream out(csv);
  for (const auto &probs : pending)
    // BUG(torch-non-blocking-d2h-race): every element is a copy still in
    // flight; nothing synchronised since the loop above.
    write_row(out, probs);
}

// Waits for the device so that each lap covers the queued work.
struct LatencyProbe {
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  double lap() {
    if (torch::cuda::is_available())
      torch::cuda::synchronize();
    const auto now = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - last).count();
    last = now;
    return ms;
  }
};

void benchmark(R2Plus1D &net, torch::Device device) {
  torch::NoGradGuard no_grad;
  net->eval();
  LatencyProbe probe;
  std::mt19937 rng(11);
  const std::array<torch::Tensor, 2> warmup = {decode_clip(rng, 0), decode_clip(rng, 1)};
  for (const auto &clip : warmup)
    // BUG(torch-non-blocking-pageable): the warm-up clips are decoded into
    // pageable memory.
    net->forward(clip.to(device, /*non_blocking=*/true));
  probe.lap();
  auto batch = PinnedClipSource(16, 3).next();
  auto logits = net->forward(to_device_async(batch.frames, device));
  auto top = logits.argmax(1).to(torch::kCPU, /*non_blocking=*/true);
  const double ms = probe.lap();
  // OK(torch-non-blocking-d2h-race): lap() synchronised the device.
  std::cout << "16 clips in " << ms << " ms, first action " << top[0].item<int64_t>() << '\n';
}

// Top action of each clip, copied back while the caller prepares the next batch.
void top_actions(R2Plus1D &net, const torch::Tensor &clips, torch::Tensor &top) {
  torch::NoGradGuard no_grad;
  net->eval();
  top = net->forward(clips).argmax(1).to(torch::kCPU, /*non_blocking=*/true);
}

void fit_rare_head(R2Plus1D &backbone, std::deque<ClipBatch> replay, torch::Device device, int64_t epochs) {
  backbone->eval();
  torch::nn::Linear head(kWidth, kActions);
  head->to(device);
  torch::optim::Adam head_opt(head->parameters(), torch::optim::AdamOptions(5e-4));
  auto head_step = [&](const torch::Tensor &clips, const torch::Tensor &labels) {
    torch::Tensor feats;
    {  // the backbone stays frozen
      torch::NoGradGuard no_grad;
      feats = backbone->features(clips);
    }
    auto loss = F::cross_entropy(head->forward(feats), labels);
    loss.backward();
    // BUG(torch-missing-zero-grad): nothing in the replay loop ever clears
    // the head's gradients.
    head_opt.step();
  };
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    std::deque<ClipBatch> queue = replay;
    while (!queue.empty()) {
      // BUG(torch-non-blocking-pageable): the replayed clips were decoded
      // into pageable memory.
      auto clips = queue.front().frames.to(device, /*non_blocking=*/true);
      auto labels = queue.front().labels.to(device);
      head_step(clips, labels);
      queue.pop_front();
    }
  }
}

int main() {
  torch::manual_seed(245);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  VideoTrainConfig cfg;

  R2Plus1D r21d;
  FrameAverage baseline;
  r21d->to(device);
  baseline->to(device);
  torch::optim::SGD opt_r21d(r21d->parameters(), torch::optim::SGDOptions(cfg.lr).momentum(0.9));
  torch::optim::SGD opt_base(baseline->parameters(), torch::optim::SGDOptions(cfg.lr).momentum(0.9));
  PinnedClipSource source(cfg.batch, 245);
  train_backbone(r21d, opt_r21d, source, cfg, device);
  train_backbone(baseline, opt_base, source, cfg, device);

  std::vector<int64_t> test_actions(60);
  for (size_t i = 0; i < test_actions.size(); ++i) test_actions[i] = static_cast<int64_t>(i) % kActions;
  score_test_clips(r21d, test_actions, device, "r21d_scores.csv");
  benchmark(r21d, device);

  // OK(torch-non-blocking-pageable): next() returns page-locked buffers.
  auto shelf_cam = PinnedClipSource(4, 9).next().frames.to(device, /*non_blocking=*/true);
  torch::Tensor top;
  top_actions(r21d, shelf_cam, top);
  // BUG(torch-non-blocking-d2h-race): top_actions() filled the out-parameter
  // with a copy still in flight.
  const int64_t *actions = top.data_ptr<int64_t>();
  std::cout << "shelf camera: first two actions " << actions[0] << ' ' << actions[1] << '\n';

  std::mt19937 rng(5);
  std::deque<ClipBatch> replay;
  for (int64_t i = 0; i < 12; ++i) {
    const int64_t rare = kActions - 1 - (i % 2);
    replay.push_back({decode_clip(rng, rare), torch::full({1}, rare, torch::kLong)});
  }
  fit_rare_head(r21d, replay, device, 5);
  std::cout << "rare-action head fitted on " << replay.size() << " clips\n";
}
