// Text-to-speech aligner: learns a soft alignment between phoneme encodings
// and mel-spectrogram frames (dot-product attention of two small encoders),
// with the guided-attention prior of Tachibana et al. pulling it towards the
// diagonal, and a duration predictor trained on the hard alignment it finds.
// The trainer stages each utterance in host buffers it allocates once, keeps
// the corpus' mel statistics in a normaliser callback, and records how sharp
// the alignment is after every step. At the end it predicts frame durations
// for unseen phoneme sequences, which the acoustic model's upsampler consumes.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <random>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace tts {

constexpr int64_t kPhonemes = 72, kMels = 80, kDim = 128, kMaxPhonemes = 40, kMaxFrames = 40 * 8;

struct Utterance {
  std::vector<int64_t> phonemes;
  torch::Tensor mel;  // T x kMels, log-magnitude
};

struct AlignerImpl : nn::Module {
  AlignerImpl()
      : embed(register_module("embed", nn::Embedding(kPhonemes, kDim))),
        text_conv(register_module("text_conv", nn::Conv1d(nn::Conv1dOptions(kDim, kDim, 5).padding(2)))),
        drop(register_module("drop", nn::Dropout(0.1))),
        mel_proj(register_module("mel_proj", nn::Linear(kMels, kDim))),
        duration(register_module("duration", nn::Linear(kDim, 1))) {}

  torch::Tensor encode_text(const torch::Tensor &ids) {
    auto h = text_conv->forward(embed->forward(ids).t().unsqueeze(0)).squeeze(0).t();
    return drop->forward(torch::relu(h));  // N x kDim
  }

  // Attention N x T (each frame's distribution over phonemes) and log-durations N.
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor &ids, const torch::Tensor &mel) {
    auto text = encode_text(ids);
    auto frames = mel_proj->forward(mel);
    auto attn = torch::softmax(torch::matmul(text, frames.t()) / std::sqrt(static_cast<double>(kDim)), 0);
    return {attn, duration->forward(text).squeeze(1)};
  }

  torch::Tensor log_durations(const torch::Tensor &ids) { return duration->forward(encode_text(ids)).squeeze(1); }

  nn::Embedding embed;
  nn::Conv1d text_conv;
  nn::Dropout drop;
  nn::Linear mel_proj, duration;
};
TORCH_MODULE(Aligner);

// Per-bin mean and standard deviation of the corpus' mel frames.
std::pair<torch::Tensor, torch::Tensor> mel_statistics(const std::vector<Utterance> &corpus) {
  std::vector<torch::Tensor> mels;
  for (const auto &u : corpus)
    mels.push_back(u.mel);
  auto all = torch::cat(mels, 0);
  return {all.mean(0), all.std(0).clamp_min(1e-3)};
}

// Mean of the per-frame attention peak: 1.0 is a perfectly sharp alignment.
void track_sharpness(const torch::Tensor &attn, std::vector<float> &history) {
  // BUG(torch-host-sync-in-loop): fit_epoch() calls this after every step
  // with the attention on the trainer's device; .cpu() waits for the GPU.
  auto peak = std::get<0>(attn.max(0)).mean().cpu();
  history.push_back(peak.item<float>());
}

std::vector<int64_t> to_vector(const torch::Tensor &host) {
  const int64_t *p = host.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + host.numel());
}

class AlignerTrainer {
 public:
  AlignerTrainer(Aligner model, torch::Device device, const std::vector<Utterance> &corpus)
      : model_(std::move(model)), device_(device), grid_opts_(torch::TensorOptions().dtype(torch::kFloat)),
        opt_(model_->parameters(), torch::optim::AdamOptions(5e-4)),
        mel_staging_(torch::empty({kMaxFrames, kMels}, torch::TensorOptions().pinned_memory(true))),
        id_staging_(torch::zeros({kMaxPhonemes}, torch::kLong)) {
    model_->to(device_);
    auto stats = mel_statistics(corpus);
    normalize_ = [device = device_, mean = stats.first, scale = stats.second](const torch::Tensor &mel) {
      // BUG(torch-device-mismatch): mean and scale were captured on the CPU;
      // the frames are moved to the trainer's device first.
      return (mel.to(device) - mean) / scale;
    };
  }

  float fit_epoch(const std::vector<Utterance> &data, std::vector<float> &sharpness) {
    model_->train();
    auto epoch_loss = torch::zeros({}, device_);
    for (const auto &utt : data) {
      const auto n = static_cast<int64_t>(utt.phonemes.size()), t = utt.mel.size(0);
      auto mel_slot = mel_staging_.narrow(0, 0, t);
      mel_slot.copy_(utt.mel);
      auto id_slot = id_staging_.narrow(0, 0, n);
      id_slot.copy_(torch::tensor(utt.phonemes));
      // OK(torch-non-blocking-pageable): mel_staging_ is pinned in the constructor.
      auto mel = normalize_(mel_slot.to(device_, /*non_blocking=*/true));
      // BUG(torch-non-blocking-pageable): id_staging_ was allocated with
      // torch::zeros, pageable; only the mel buffer was pinned.
      auto ids = id_slot.to(device_, /*non_blocking=*/true);
      opt_.zero_grad();
      auto [attn, log_dur] = model_->forward(ids, mel);
      // BUG(torch-device-mismatch): guide() builds the prior with grid_opts_,
      // which names a dtype but no device: it is on the CPU.
      auto guided = (attn * guide(n, t)).mean();
      auto counts = torch::bincount(attn.argmax(0), {}, n).to(torch::kFloat);
      // OK(torch-device-mismatch): the durations are counted on the attention's device.
      auto dur_loss = F::mse_loss(log_dur, torch::log1p(counts));
      auto loss = guided + 0.1 * dur_loss;
      loss.backward();
      opt_.step();
      // OK(torch-loss-accumulation-graph, torch-host-sync-in-loop): detached, on the device.
      epoch_loss += loss.detach();
      track_sharpness(attn, sharpness);
    }
    // OK(torch-host-sync-in-loop): once per epoch.
    return epoch_loss.item<float>() / static_cast<float>(data.size());
  }

  // Frames per phoneme for an unseen sequence.
  std::vector<int64_t> predict_durations(const std::vector<int64_t> &phonemes) {
    torch::NoGradGuard no_grad;
    model_->eval();
    auto log_dur = model_->log_durations(torch::tensor(phonemes).to(device_));
    auto frames = torch::round(torch::expm1(log_dur)).clamp_min(1).to(torch::kLong);
    auto host = frames.to(torch::kCPU, /*non_blocking=*/true);
    model_->train();
    // BUG(torch-non-blocking-d2h-race): to_vector() reads the buffer the
    // non-blocking copy above is still filling.
    return to_vector(host);
  }

  // Hard alignment (frame -> phoneme) of one utterance, for inspection.
  std::vector<int64_t> hard_alignment(const Utterance &utt) {
    torch::NoGradGuard no_grad;
    model_->eval();
    auto ids = torch::tensor(utt.phonemes).to(device_);
    auto mel = normalize_(utt.mel);
    auto host = std::get<0>(model_->forward(ids, mel)).argmax(0).to(torch::kCPU, /*non_blocking=*/true);
    model_->train();
    if (device_.is_cuda())
      torch::cuda::synchronize();
    // OK(torch-non-blocking-d2h-race): synchronised above when the copy was asynchronous.
    return to_vector(host);
  }

 private:
  // Guided-attention prior W[n, t] = 1 - exp(-(n/N - t/T)^2 / (2 g^2)), g = 0.2.
  torch::Tensor guide(int64_t n, int64_t t) const {
    auto pn = torch::arange(n, grid_opts_).div(static_cast<double>(n)).unsqueeze(1);
    auto pt = torch::arange(t, grid_opts_).div(static_cast<double>(t)).unsqueeze(0);
    return 1 - torch::exp(-(pn - pt).pow(2) / (2 * 0.2 * 0.2));
  }

  Aligner model_;
  torch::Device device_;
  torch::TensorOptions grid_opts_;
  torch::optim::Adam opt_;
  torch::Tensor mel_staging_, id_staging_;
  std::function<torch::Tensor(const torch::Tensor &)> normalize_;
};

std::vector<Utterance> synth_corpus(std::mt19937 &rng, int count) {
  std::uniform_int_distribution<int64_t> phone(1, kPhonemes - 1), len(8, kMaxPhonemes), dur(2, 8);
  std::vector<Utterance> out;
  for (int i = 0; i < count; ++i) {
    Utterance u;
    std::vector<torch::Tensor> frames;
    for (int64_t j = 0, n = len(rng); j < n; ++j) {
      u.phonemes.push_back(phone(rng));
      auto tone = torch::randn({1, kMels}) + static_cast<double>(u.phonemes.back() % 9);
      frames.push_back(tone.expand({dur(rng), kMels}) + 0.1 * torch::randn({1, kMels}));
    }
    u.mel = torch::cat(frames, 0);
    out.push_back(std::move(u));
  }
  return out;
}

}  // namespace tts

int main() {
  torch::manual_seed(337);
  std::mt19937 rng(337);
  // OK(torch-cuda-unguarded): CUDA only when it is available.
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  auto corpus = tts::synth_corpus(rng, 240);

  tts::AlignerTrainer trainer(tts::Aligner(), device, corpus);
  std::vector<float> sharpness;
  for (int epoch = 0; epoch < 6; ++epoch) {
    const float loss = trainer.fit_epoch(corpus, sharpness);
    std::cout << "epoch " << epoch << " loss " << loss << " sharpness " << sharpness.back() << '\n';
  }
  const auto align = trainer.hard_alignment(corpus.front());
  std::cout << "first utterance: " << align.size() << " frames aligned\n";
  const auto durations = trainer.predict_durations({12, 40, 7, 33, 5, 61, 18});
  int64_t frames = 0;
  for (auto d : durations)
    frames += d;
  std::cout << "predicted " << frames << " frames for 7 phonemes\n";
  return 0;
}
