// Voice activity detection for a meeting-room microphone array: log
// spectra of 25 ms frames go through a projection and a 2-layer GRU that
// emits a speech probability per 10 ms hop. Training mixes clips with
// forced-alignment labels, clips labelled by an energy threshold and
// unlabelled clips (skipped), chosen by a switch on the label source. The
// deployed detector streams 330 ms chunks, keeps the GRU state between
// chunks and hands each chunk's probabilities to a std::function sink that
// turns them into speech/non-speech decisions on the host.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kWin = 400, kHop = 160, kBins = kWin / 2 + 1, kHid = 64, kLayers = 2;
constexpr int64_t kChunkFrames = 32, kChunkSamples = (kChunkFrames - 1) * kHop + kWin;
constexpr int64_t kClipSamples = 2 * 16000, kBatch = 16;

enum class LabelSource { kAligned, kEnergy, kUnlabeled };

// wave [B, S] -> log-magnitude spectra [B, F, kBins], on the wave's device
torch::Tensor frame_features(const torch::Tensor &wave) {
  auto frames = wave.unfold(-1, kWin, kHop) * torch::hann_window(kWin, wave.options());
  return torch::log1p(torch::abs(torch::fft::rfft(frames)));
}

struct VadNetImpl : torch::nn::Module {
  VadNetImpl()
      : proj(register_module("proj", torch::nn::Linear(kBins, kHid))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kHid})))),
        gru(register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(kHid, kHid).num_layers(kLayers).batch_first(true)))),
        drop(register_module("drop", torch::nn::Dropout(0.1))),
        out(register_module("out", torch::nn::Linear(kHid, 1))) {}

  // feats [B, F, kBins], h0 [kLayers, B, kHid] -> (logits [B, F], h)
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor &feats, const torch::Tensor &h0) {
    auto x = torch::relu(norm->forward(proj->forward(feats)));
    auto y = gru->forward(x, h0);
    return {out->forward(drop->forward(std::get<0>(y))).squeeze(-1), std::get<1>(y)};
  }

  torch::nn::Linear proj;
  torch::nn::LayerNorm norm;
  torch::nn::GRU gru;
  torch::nn::Dropout drop;
  torch::nn::Linear out;
};
TORCH_MODULE(VadNet);

// Clips with harmonic "speech" bursts over pink-ish noise, and per-frame labels.
std::pair<torch::Tensor, torch::Tensor> synth_clips(int64_t n, std::mt19937 &rng) {
  const int64_t frames = (kClipSamples - kWin) / kHop + 1;
  auto wave = 0.05 * torch::randn({n, kClipSamples});
  auto labels = torch::zeros({n, frames});
  auto t = torch::arange(kClipSamples, torch::kFloat) / 16000.0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t on = static_cast<int64_t>(rng() % (frames / 2)), len = 20 + static_cast<int64_t>(rng() % 60);
    const double f0 = 100.0 + static_cast<double>(rng() % 150);
    auto voiced = torch::sin(2 * M_PI * f0 * t) + 0.5 * torch::sin(4 * M_PI * f0 * t);
    wave[i].slice(0, on * kHop, (on + len) * kHop).add_(0.4 * voiced.slice(0, on * kHop, (on + len) * kHop));
    labels[i].slice(0, on, on + len).fill_(1.0);
  }
  return {wave, labels};
}

void train(VadNet &net, torch::Device device, int64_t steps,
           const std::function<void(int64_t, const torch::Tensor &)> &on_step) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  std::mt19937 rng(227);
  const auto h0 = torch::zeros({kLayers, kBatch, kHid}, torch::TensorOptions().device(device));
  for (int64_t step = 0; step < steps; ++step) {
    auto [wave, aligned] = synth_clips(kBatch, rng);
    // BUG(torch-non-blocking-pageable): synth_clips() returns plain CPU
    // tensors; without pinning this copy is synchronous.
    auto feats = frame_features(wave.to(device, /*non_blocking=*/true));
    torch::Tensor target;
    switch (static_cast<LabelSource>(step % 3)) {
      case LabelSource::kAligned:
        target = aligned.to(device);
        break;
      case LabelSource::kEnergy:
        target = (feats.mean(-1) > feats.mean()).to(torch::kFloat);
        break;
      case LabelSource::kUnlabeled:
        continue;
    }
    auto [logits, h] = net->forward(feats, h0);
    // OK(torch-device-mismatch): every case that gets here put target on
    // the device.
    auto loss = F::binary_cross_entropy_with_logits(logits, target);
    opt.zero_grad();
    loss.backward();
    opt.step();
    on_step(step, loss);
    if (step % 300 == 0) {
      // OK(torch-host-sync-in-loop): every 300 steps.
      std::cout << "step " << step << " bce " << loss.item<double>() << "\n";
    }
  }
}

class StreamingVad {
 public:
  StreamingVad(VadNet net, torch::Device device)
      : net_(std::move(net)), device_(device),
        hidden_(torch::zeros({kLayers, 1, kHid}, torch::TensorOptions().device(device))) {}

  void on_probs(std::function<void(const torch::Tensor &)> sink) { sink_ = std::move(sink); }

  // One chunk of kChunkSamples PCM samples.
  void push(const std::vector<float> &pcm) {
    auto host = torch::from_blob(const_cast<float *>(pcm.data()), {1, kChunkSamples}, torch::kFloat);
    torch::Tensor wave;
    if (device_.is_cuda()) {
      // OK(torch-non-blocking-pageable): copied into pinned memory first.
      wave = host.pin_memory().to(device_, /*non_blocking=*/true);
    } else {
      wave = host.clone();
    }
    auto [logits, h] = net_->forward(frame_features(wave), hidden_);
    hidden_ = h;
    sink_(torch::sigmoid(logits).squeeze(0));
  }

  void reset() {
    hidden_.zero_();
    if (device_.is_cuda())
      // BUG(torch-empty-cache-in-loop): main() resets the detector after
      // every recording.
      c10::cuda::CUDACachingAllocator::emptyCache();
  }

  // Whole recording at once -> speech probability per frame, on the host.
  torch::Tensor score_offline(const torch::Tensor &wave) {
    auto feats = frame_features(wave.to(device_).unsqueeze(0));
    auto h0 = torch::zeros({kLayers, 1, kHid});
    // BUG(torch-device-mismatch): h0 was created without device_, the GRU
    // state must be on the net's device.
    auto out = net_->forward(feats, h0);
    auto host = torch::sigmoid(std::get<0>(out)).squeeze(0).to(torch::kCPU, /*non_blocking=*/true);
    if (device_.is_cuda())
      c10::cuda::getCurrentCUDAStream().synchronize();
    return host;
  }

 private:
  VadNet net_;
  torch::Device device_;
  torch::Tensor hidden_;
  std::function<void(const torch::Tensor &)> sink_;
};

void dump_spectrogram(const std::string &path, torch::Tensor feats) {
  feats = feats.to(torch::kCPU).transpose(0, 1);
  // BUG(torch-tensor-to-discarded): the contiguous copy is dropped; the raw
  // write below sees the transposed strides.
  feats.contiguous();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char *>(feats.data_ptr<float>()), static_cast<std::streamsize>(feats.numel() * sizeof(float)));
}

int main() {
  torch::manual_seed(227);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  VadNet net;
  net->to(device);

  std::vector<float> curve;
  train(net, device, 3000, [&](int64_t, const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): train() calls the hook on every step;
    // copying the loss to the CPU waits for the GPU each time.
    curve.push_back(loss.detach().to(torch::kCPU).item<float>());
  });
  std::cout << "final smoothed bce " << curve.back() << "\n";

  net->eval();
  c10::InferenceMode inference;
  StreamingVad vad(net, device);
  std::vector<uint8_t> decisions;
  vad.on_probs([&](const torch::Tensor &probs) {
    auto host = probs.to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): the probabilities are thresholded on
    // the host while the copy may still be in flight.
    auto p = host.accessor<float, 1>();
    for (int64_t i = 0; i < p.size(0); ++i)
      decisions.push_back(p[i] > 0.5f ? 1 : 0);
  });

  std::mt19937 rng(7);
  for (int rec = 0; rec < 12; ++rec) {
    auto [wave, labels] = synth_clips(1, rng);
    std::vector<float> pcm(wave.data_ptr<float>(), wave.data_ptr<float>() + wave.numel());
    for (size_t off = 0; off + kChunkSamples <= pcm.size(); off += kChunkFrames * kHop)
      vad.push(std::vector<float>(pcm.begin() + off, pcm.begin() + off + kChunkSamples));
    vad.reset();
  }
  int64_t speech = 0;
  for (auto d : decisions)
    speech += d;
  std::cout << "speech frames " << speech << " of " << decisions.size() << "\n";

  std::mt19937 rng_eval(8);
  auto [clip, clip_labels] = synth_clips(1, rng_eval);
  auto probs = vad.score_offline(clip[0]);
  // OK(torch-non-blocking-d2h-race): score_offline() synchronised before it
  // returned the host copy.
  auto agree = ((probs > 0.5).to(torch::kFloat) == clip_labels[0]).to(torch::kFloat).mean().item<double>();
  std::cout << "offline frame agreement " << agree << "\n";
  dump_spectrogram("clip0.f32", frame_features(clip)[0]);
  return 0;
}
