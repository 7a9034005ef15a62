// A small MelGAN-style vocoder trained as a least-squares GAN: the generator
// upsamples a log-mel spectrogram (32 bands, hop 16) to a waveform, the
// critic scores waveform patches and takes several steps per generator
// step. Training audio arrives from a microphone feed that fills a host
// sample ring. Both networks run under a project autocast scope (float16);
// the critic's loss carries a static loss scale. A preview of the fixed
// test utterance is written after each epoch, and the text-to-speech
// front end hands mel frames over as a std::vector<float>.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define VOC_AMP(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#define VOC_AMP_IS_ON() at::autocast::is_autocast_enabled(at::kCUDA)
#else
#define VOC_AMP(on) at::autocast::set_enabled(on)
#define VOC_AMP_IS_ON() at::autocast::is_enabled()
#endif

constexpr int64_t kMels = 32, kHop = 16, kMelFrames = 16, kSamples = kHop * kMelFrames;
constexpr double kLossScale = 1024.0;

// CUDA autocast (float16) for one scope; restores the previous state.
class AutocastScope {
 public:
  AutocastScope() : was_on_(VOC_AMP_IS_ON()) { VOC_AMP(true); }
  ~AutocastScope() { VOC_AMP(was_on_); }
  AutocastScope(const AutocastScope &) = delete;
  AutocastScope &operator=(const AutocastScope &) = delete;

 private:
  bool was_on_;
};

struct GeneratorImpl : torch::nn::Module {
  GeneratorImpl()
      : up(register_module(
            "up", torch::nn::Sequential(
                      torch::nn::Conv1d(torch::nn::Conv1dOptions(kMels, 64, 7).padding(3)), torch::nn::LeakyReLU(),
                      torch::nn::ConvTranspose1d(torch::nn::ConvTranspose1dOptions(64, 32, 8).stride(4).padding(2)),
                      torch::nn::LeakyReLU(),
                      torch::nn::ConvTranspose1d(torch::nn::ConvTranspose1dOptions(32, 16, 8).stride(4).padding(2)),
                      torch::nn::LeakyReLU(), torch::nn::Conv1d(torch::nn::Conv1dOptions(16, 1, 7).padding(3))))) {}
  // mel [B, kMels, T] -> waveform [B, 1, T * kHop]
  torch::Tensor forward(const torch::Tensor &mel) { return torch::tanh(up->forward(mel)); }
  torch::nn::Sequential up;
};
TORCH_MODULE(Generator);

struct CriticImpl : torch::nn::Module {
  CriticImpl()
      : net(register_module(
            "net", torch::nn::Sequential(
                       torch::nn::Conv1d(torch::nn::Conv1dOptions(1, 16, 15).padding(7)), torch::nn::LeakyReLU(),
                       torch::nn::Conv1d(torch::nn::Conv1dOptions(16, 32, 41).stride(4).padding(20).groups(4)),
                       torch::nn::LeakyReLU(), torch::nn::Conv1d(torch::nn::Conv1dOptions(32, 1, 3).padding(1))))) {}
  torch::Tensor forward(const torch::Tensor &wave) { return net->forward(wave); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Critic);

// The sound card's ring of samples, exposed to the trainer one batch at a time.
class MicFeed {
 public:
  MicFeed(int64_t batch, torch::Device device, uint32_t seed)
      : batch_(batch), device_(device), rng_(seed), samples_(static_cast<size_t>(batch * kSamples)) {}

  torch::Tensor next_on_device() {
    std::uniform_real_distribution<float> pitch(80.f, 400.f);
    std::normal_distribution<float> noise(0.f, 0.02f);
    for (int64_t b = 0; b < batch_; ++b) {
      const float f0 = pitch(rng_);
      for (int64_t i = 0; i < kSamples; ++i)
        samples_[static_cast<size_t>(b * kSamples + i)] =
            0.5f * std::sin(6.2831853f * f0 * static_cast<float>(i) / 16000.f) + noise(rng_);
    }
    auto ring = torch::from_blob(samples_.data(), {batch_, 1, kSamples}, torch::kFloat);
    // BUG(torch-non-blocking-pageable): the ring is a std::vector member;
    // from_blob over it is pageable, so the copy runs synchronously.
    return ring.to(device_, /*non_blocking=*/true);
  }

 private:
  int64_t batch_;
  torch::Device device_;
  std::mt19937 rng_;
  std::vector<float> samples_;
};

struct GanConfig {
  int64_t n_critic = 3;
  double lr_g = 2e-4, lr_d = 2e-4;
};

class VocoderTrainer {
 public:
  VocoderTrainer(Generator gen, Critic critic, const GanConfig &cfg, torch::Device device)
      : gen_(std::move(gen)), critic_(std::move(critic)), cfg_(cfg), device_(device),
        opt_g_(gen_->parameters(), torch::optim::AdamOptions(cfg.lr_g).betas({0.5, 0.9})),
        opt_d_(critic_->parameters(), torch::optim::AdamOptions(cfg.lr_d).betas({0.5, 0.9})),
        filterbank_(torch::rand({kHop, kMels}, device)),
        cond_(torch::zeros({1, kMels, kMelFrames}, torch::TensorOptions().device(device))),
        fixed_mel_(torch::randn({1, kMels, kMelFrames}, device)) {}

  torch::Tensor log_mel(const torch::Tensor &wave) const {
    auto frames = wave.squeeze(1).unfold(-1, kHop, kHop);  // [B, T, kHop]
    return torch::log(1e-5 + frames.abs().matmul(filterbank_)).transpose(1, 2);
  }

  void fit(MicFeed &feed, int64_t steps) {
    for (int64_t step = 0; step < steps; ++step) {
      train_step(feed.next_on_device());
      if (step % 50 == 0)
        // OK(torch-host-sync-in-loop): one step in 50.
        std::cout << "step " << step << " g " << last_g_.item<double>() << '\n';
    }
  }

  void snapshot() {
    torch::NoGradGuard no_grad;
    preview_ = gen_->forward(fixed_mel_).to(torch::kCPU, /*non_blocking=*/true);
  }

  void write_preview(const std::string &path) const {
    if (!preview_)
      return;
    std::ofstream out(path, std::ios::binary);
    // BUG(torch-non-blocking-d2h-race): snapshot() only started the copy
    // into the optional member; main() calls this right after it.
    const float *pcm = preview_->data_ptr<float>();
    out.write(reinterpret_cast<const char *>(pcm), static_cast<std::streamsize>(preview_->numel() * sizeof(float)));
  }

  // Mel frames from the TTS front end, row-major [kMels, kMelFrames].
  const torch::Tensor &condition_on(const std::vector<float> &mel_frames) {
    auto host = torch::tensor(mel_frames).view({1, kMels, kMelFrames});
    // BUG(torch-non-blocking-pageable): torch::tensor() allocates pageable
    // memory; the copy into the device buffer is synchronous.
    cond_.copy_(host, /*non_blocking=*/true);
    return cond_;
  }

  Generator &generator() { return gen_; }

 private:
  void reset_critic() { opt_d_.zero_grad(); }

  void unscale(const std::vector<torch::Tensor> &params) {
    for (const auto &p : params)
      if (p.grad().defined())
        p.grad().div_(kLossScale);
  }

  void train_step(const torch::Tensor &real) {
    auto mel = log_mel(real);
    reset_critic();
    for (int64_t k = 0; k < cfg_.n_critic; ++k) {
      torch::Tensor d_loss;
      {
        AutocastScope amp;
        auto fake = gen_->forward(mel).detach();
        auto real_score = critic_->forward(real), fake_score = critic_->forward(fake);
        d_loss = F::mse_loss(real_score, torch::ones_like(real_score)) +
                 F::mse_loss(fake_score, torch::zeros_like(fake_score));
      }
      // OK(torch-autocast-region): the critic loss carries the loss scale.
      (d_loss * kLossScale).backward();
      unscale(critic_->parameters());
      // BUG(torch-missing-zero-grad): reset_critic() ran once before the
      // critic loop; each further critic step adds the earlier gradients.
      opt_d_.step();
    }
    opt_g_.zero_grad();
    torch::Tensor g_loss;
    {
      AutocastScope amp;
      auto score = critic_->forward(gen_->forward(mel));
      g_loss = F::mse_loss(score, torch::ones_like(score));
    }
    // BUG(torch-autocast-region): a float16 loss reaches backward() with no
    // loss scaling.
    g_loss.backward();
    opt_g_.step();
    last_g_ = g_loss.detach();
  }

  Generator gen_;
  Critic critic_;
  GanConfig cfg_;
  torch::Device device_;
  torch::optim::Adam opt_g_, opt_d_;
  torch::Tensor filterbank_, cond_, fixed_mel_, last_g_;
  std::optional<torch::Tensor> preview_;
};

void check_audio(const torch::Tensor &wave, const std::string &what) {
  const double peak = wave.abs().max().item<double>();
  if (!std::isfinite(peak) || peak > 1.0 + 1e-3)
    throw std::runtime_error(what + ": clipped or non-finite audio");
}

torch::Tensor synthesize(Generator &gen, const torch::Tensor &mel) {
  torch::NoGradGuard no_grad;
  // BUG(torch-autocast-region): check_audio() throws on a bad waveform and
  // leaves the thread in autocast.
  VOC_AMP(true);
  auto wave = gen->forward(mel).to(torch::kFloat);
  check_audio(wave, "tts demo");
  VOC_AMP(false);
  return wave;
}

torch::Tensor validation_wave(int64_t n) {
  auto t = torch::arange(kSamples, torch::kFloat).div(16000.0);
  return (0.4 * torch::sin(2.0 * 3.14159265358979 * 220.0 * t)).expand({n, 1, kSamples}).contiguous().pin_memory();
}

int main() {
  torch::manual_seed(246);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Generator gen;
  Critic critic;
  gen->to(device);
  critic->to(device);
  VocoderTrainer trainer(gen, critic, GanConfig{}, device);
  MicFeed feed(8, device, 246);

  for (int epoch = 0; epoch < 4; ++epoch) {
    trainer.fit(feed, 200);
    trainer.snapshot();
    trainer.write_preview("preview_epoch" + std::to_string(epoch) + ".f32");
  }

  // OK(torch-non-blocking-pageable): validation_wave() returns pinned memory.
  auto val = validation_wave(4).to(device, /*non_blocking=*/true);
  {
    torch::NoGradGuard no_grad;
    auto resynth = trainer.generator()->forward(trainer.log_mel(val));
    std::cout << "validation L1 " << (resynth - val).abs().mean().item<double>() << '\n';
  }

  std::vector<float> tts_mel(static_cast<size_t>(kMels * kMelFrames));
  for (size_t i = 0; i < tts_mel.size(); ++i)
    tts_mel[i] = std::log(1e-3f + static_cast<float>(i % kMels) / kMels);
  auto demo = synthesize(trainer.generator(), trainer.condition_on(tts_mel));
  std::cout << "demo: " << demo.size(2) << " samples\n";
}
