// Audio tagging for a sound-archive: 1 s clips at 16 kHz get any of ten tags
// (speech, music, dog, siren, engine, rain, birds, applause, keyboard,
// silence). A log-mel front end runs on its own card next to the decoder, the
// tagger CNN on the training card picked on the command line. Tag scores of
// the archive are written as one line per clip.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kRate = 16000, kFft = 400, kHop = 160, kMels = 64, kTags = 10;

struct AudioConfig {
  int train_gpu = 0;
  // BUG(torch-device-index-unchecked): the front end assumes a second card;
  // a job granted one GPU sees only ordinal 0.
  std::string frontend_device = "cuda:1";
  int64_t batch = 64;
  int epochs = 3;
  bool trim_cache_each_epoch = true;  // the archive box is shared with the transcoder
};

struct KeepCache {
  void after_epoch() const {}
};
struct TrimCache {
  void after_epoch() const {
    // BUG(torch-empty-cache-in-loop): run by std::visit at the end of every
    // epoch; the next epoch cudaMallocs the same blocks again.
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
};
using MemoryPolicy = std::variant<KeepCache, TrimCache>;

// Log-mel spectrogram on the front-end card: [B, kRate] -> [B, 1, frames, kMels].
class LogMelFrontend {
 public:
  explicit LogMelFrontend(torch::Device device)
      : device_(device),
        window_(torch::hann_window(kFft, torch::TensorOptions().device(device))),
        fbank_(mel_filterbank().to(device)) {}

  torch::Tensor operator()(const torch::Tensor &wave) const {
    auto w = wave.to(device_);
    // OK(torch-device-mismatch): the window and the filter bank were created on device_.
    auto frames = w.unfold(1, kFft, kHop) * window_;
    auto power = torch::fft::rfft(frames).abs().pow(2);
    return torch::log(torch::matmul(power, fbank_.t()) + 1e-6).unsqueeze(1);
  }

 private:
  static torch::Tensor mel_filterbank() {
    auto mel = torch::linspace(0.0, 2595.0 * std::log10(1.0 + (kRate / 2.0) / 700.0), kMels + 2);
    auto hz = 700.0 * (torch::pow(10.0, mel / 2595.0) - 1.0);
    auto bin_hz = torch::linspace(0.0, kRate / 2.0, kFft / 2 + 1);
    auto lo = hz.slice(0, 0, kMels).unsqueeze(1), mid = hz.slice(0, 1, kMels + 1).unsqueeze(1);
    auto hi = hz.slice(0, 2, kMels + 2).unsqueeze(1);
    return torch::clamp_min(torch::minimum((bin_hz - lo) / (mid - lo), (hi - bin_hz) / (hi - mid)), 0.0);
  }
  torch::Device device_;
  torch::Tensor window_, fbank_;
};

struct TaggerImpl : nn::Module {
  TaggerImpl()
      : body(register_module("body", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)),
                                                    nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2),
                                                    nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)),
                                                    nn::BatchNorm2d(64), nn::ReLU()))),
        drop(register_module("drop", nn::Dropout(0.3))),
        head(register_module("head", nn::Linear(64, kTags))) {}
  torch::Tensor forward(const torch::Tensor &mel) {
    auto h = body->forward(mel).amax({2, 3});
    return head(drop(h));
  }
  nn::Sequential body;
  nn::Dropout drop;
  nn::Linear head;
};
TORCH_MODULE(Tagger);

template <typename T>
class RunningMean {
 public:
  explicit RunningMean(T zero) : sum_(std::move(zero)) {}
  void reset(T zero) {
    sum_ = std::move(zero);
    n_ = 0;
  }
  void add(const T &v) {
    // BUG(torch-loss-accumulation-graph): the tagger adds its undetached loss
    // every step; the epoch mean keeps every step's graph.
    sum_ += v;
    ++n_;
  }
  T mean() const { return sum_ / static_cast<double>(std::max<int64_t>(n_, 1)); }

 private:
  T sum_;
  int64_t n_ = 0;
};

// Per-tag weight of the positive class: rare tags (siren, applause) count more.
torch::Tensor tag_pos_weights() {
  return torch::tensor({1.0f, 1.0f, 3.0f, 6.0f, 2.0f, 2.0f, 3.0f, 6.0f, 4.0f, 1.0f});
}

// Scores of one batch, copied back for the archive writer.
torch::Tensor fetch_scores(const torch::Tensor &logits) {
  return torch::sigmoid(logits).to(torch::kCPU, /*non_blocking=*/true);
}

void write_tags(const std::string &clip, const torch::Tensor &scores, float threshold) {
  auto s = scores.accessor<float, 1>();
  std::cout << clip;
  for (int64_t t = 0; t < kTags; ++t)
    if (s[t] > threshold)
      std::cout << ' ' << t;
  std::cout << '\n';
}

class ArchiveTagger {
 public:
  ArchiveTagger(const AudioConfig &cfg, torch::Device device)
      : device_(device), frontend_(torch::Device(cfg.frontend_device)), batch_(cfg.batch),
        opt_(net_->parameters(), torch::optim::AdamOptions(1e-3)),
        loss_opts_(F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(tag_pos_weights())),
        pinned_wave_(torch::empty({cfg.batch, kRate}, torch::TensorOptions().pinned_memory(true))),
        train_loss_(torch::zeros({}, device)) {
    net_->to(device_);
    upload_ = [device](const torch::Tensor &host) { return host.to(device, /*non_blocking=*/true); };
    if (cfg.trim_cache_each_epoch)
      policy_ = TrimCache{};
  }

  void fit(int epochs, int64_t steps) {
    for (int epoch = 0; epoch < epochs; ++epoch) {
      fit_epoch(steps);
      std::visit([](const auto &p) { p.after_epoch(); }, policy_);
    }
  }

  void fit_epoch(int64_t steps) {
    net_->train();
    train_loss_.reset(torch::zeros({}, device_));
    std::vector<double> batch_map;
    auto log_batch_map = [&batch_map](const auto &probs, const torch::Tensor &labels_host) {
      // BUG(torch-host-sync-in-loop): a blocking copy of the batch's scores
      // to the host on every training step, for a metric.
      auto hits = (probs.cpu() > 0.5).eq(labels_host > 0.5).to(torch::kFloat);
      batch_map.push_back(hits.mean().template item<double>());
    };
    for (int64_t step = 0; step < steps; ++step) {
      pinned_wave_.copy_(torch::randn({batch_, kRate}) * 0.1);
      auto labels_host = (torch::rand({batch_, kTags}) < 0.2).to(torch::kFloat);
      // OK(torch-non-blocking-pageable): the waveform buffer is page-locked.
      auto wave = upload_(pinned_wave_);
      // BUG(torch-non-blocking-pageable): the labels are a fresh pageable
      // tensor handed to the non_blocking upload lambda.
      auto labels = upload_(labels_host);
      auto mel = frontend_(wave).to(device_);
      opt_.zero_grad();
      auto logits = net_->forward(mel);
      // BUG(torch-device-mismatch): the pos_weight inside loss_opts_ was built
      // on the host; the logits are on the training card.
      auto loss = F::binary_cross_entropy_with_logits(logits, labels, loss_opts_);
      loss.backward();
      opt_.step();
      train_loss_.add(loss);
      log_batch_map(torch::sigmoid(logits.detach()), labels_host);
    }
    std::cout << "train loss " << train_loss_.mean().item<double>() << " acc " << batch_map.back() << '\n';
  }

  void tag_archive(const std::vector<std::string> &clips, float threshold) {
    net_->eval();
    torch::NoGradGuard no_grad;
    std::deque<std::pair<std::string, torch::Tensor>> results;
    for (size_t i = 0; i < clips.size(); i += static_cast<size_t>(batch_)) {
      const int64_t n = std::min<int64_t>(batch_, static_cast<int64_t>(clips.size() - i));
      auto logits = net_->forward(frontend_(torch::randn({n, kRate}) * 0.1).to(device_));
      auto scores = fetch_scores(logits);
      for (int64_t j = 0; j < n; ++j)
        results.emplace_back(clips[i + static_cast<size_t>(j)], scores[j]);
    }
    for (const auto &r : results) {
      // BUG(torch-non-blocking-d2h-race): fetch_scores() only queued the
      // copies; the writer reads rows nothing waited for.
      write_tags(r.first, r.second, threshold);
    }
  }

  float calibrate_threshold(int64_t n) {
    net_->eval();
    torch::NoGradGuard no_grad;
    auto logits = net_->forward(frontend_(torch::randn({n, kRate}) * 0.1).to(device_));
    auto scores = fetch_scores(logits);
    auto positives = (torch::sigmoid(logits) > 0.5).sum().to(torch::kCPU);
    // OK(torch-non-blocking-d2h-race): the blocking copy just above waited
    // for the stream, after the scores' copy.
    auto s = scores.accessor<float, 2>();
    std::vector<float> top(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t t = 0; t < kTags; ++t)
        top[static_cast<size_t>(i)] = std::max(top[static_cast<size_t>(i)], s[i][t]);
    // The 20th percentile of each clip's best score: most clips get a tag.
    std::nth_element(top.begin(), top.begin() + n / 5, top.end());
    return positives.item<int64_t>() > 0 ? top[static_cast<size_t>(n / 5)] : 0.5f;
  }

 private:
  torch::Device device_;
  LogMelFrontend frontend_;
  int64_t batch_;
  Tagger net_;
  torch::optim::Adam opt_;
  F::BinaryCrossEntropyWithLogitsFuncOptions loss_opts_;
  torch::Tensor pinned_wave_;
  RunningMean<torch::Tensor> train_loss_;
  std::function<torch::Tensor(const torch::Tensor &)> upload_;
  MemoryPolicy policy_ = KeepCache{};
};

int main(int argc, char **argv) {
  if (!torch::cuda::is_available()) {
    std::cerr << "audio_tagging: needs the GPU archive box\n";
    return 1;
  }
  AudioConfig cfg;
  if (argc > 1)
    cfg.train_gpu = std::stoi(argv[1]);
  // Clamp to the cards this job can see.
  const int visible = static_cast<int>(torch::cuda::device_count());
  cfg.train_gpu = std::clamp(cfg.train_gpu, 0, visible - 1);
  torch::manual_seed(310);
  // OK(torch-device-index-unchecked): the ordinal is built at run time from
  // a value clamped to the visible cards.
  const torch::Device device("cuda:" + std::to_string(cfg.train_gpu));

  ArchiveTagger tagger(cfg, device);
  tagger.fit(cfg.epochs, 100);

  std::vector<std::string> clips(500);
  for (size_t i = 0; i < clips.size(); ++i)
    clips[i] = "archive/clip_" + std::to_string(i) + ".flac";
  tagger.tag_archive(clips, tagger.calibrate_threshold(256));
}
