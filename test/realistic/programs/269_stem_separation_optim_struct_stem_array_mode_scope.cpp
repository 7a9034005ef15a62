// Music source separation: a small convolutional mask network splits a
// mixture magnitude spectrogram into four stems (vocals, drums, bass, other).
// An auxiliary classifier learns which stems are active from the separated
// spectrograms once the separator has warmed up. Both optimizers live in one
// struct. Validation restores the caller's mode through a scope object; a
// long track is separated chunk by chunk at the end.
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <functional>
#include <iostream>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kStems = 4, kFreq = 128, kFrames = 64;
const std::array<const char *, kStems> kStemNames{{"vocals", "drums", "bass", "other"}};

struct SepConfig {
  int64_t steps = 4000, batch = 8, cls_warmup = 1000, log_every = 100, val_every = 500, chunk = kFrames;
  double lr = 1e-3, cls_lr = 1e-2, sc_weight = 0.1;
};

struct SeparatorImpl : torch::nn::Module {
  SeparatorImpl()
      : body(register_module(
            "body", torch::nn::Sequential(
                        torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)), torch::nn::BatchNorm2d(16),
                        torch::nn::ReLU(), torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)),
                        torch::nn::BatchNorm2d(32), torch::nn::ReLU(), torch::nn::Dropout2d(0.1),
                        torch::nn::Conv2d(torch::nn::Conv2dOptions(32, kStems, 1))))) {}
  // mix [B, 1, F, T] -> stems [B, kStems, F, T]
  torch::Tensor forward(const torch::Tensor &mix) { return torch::sigmoid(body->forward(mix)) * mix; }
  torch::nn::Sequential body;
};
TORCH_MODULE(Separator);

struct StemClassifierImpl : torch::nn::Module {
  StemClassifierImpl() : head(register_module("head", torch::nn::Linear(kStems * kFreq, kStems))) {}
  torch::Tensor forward(const torch::Tensor &stems) { return head->forward(stems.mean(3).flatten(1)); }
  torch::nn::Linear head;
};
TORCH_MODULE(StemClassifier);

struct Optimizers {
  Optimizers(Separator &sep_net, StemClassifier &cls_net, const SepConfig &cfg)
      : sep(sep_net->parameters(), torch::optim::AdamOptions(cfg.lr)),
        cls(cls_net->parameters(), torch::optim::SGDOptions(cfg.cls_lr).momentum(0.9)) {}
  torch::optim::Adam sep;
  torch::optim::SGD cls;
};

void zero_all(Optimizers &o) {
  o.sep.zero_grad();
  o.cls.zero_grad();
}

struct MixBatch {
  torch::Tensor mix, stems, active;
};

MixBatch make_batch(int64_t b) {
  auto active = torch::bernoulli(torch::full({b, kStems}, 0.7));
  auto stems = torch::rand({b, kStems, kFreq, kFrames}) * active.view({b, kStems, 1, 1});
  return {stems.sum(1, /*keepdim=*/true), stems, active};
}

std::vector<torch::Tensor> per_stem_l1(const torch::Tensor &est, const torch::Tensor &ref) {
  std::vector<torch::Tensor> out;
  for (int64_t s = 0; s < kStems; ++s)
    // OK(torch-loss-accumulation-graph): the terms are returned for the
    // caller's loss; no backward() or step() here.
    out.push_back(F::l1_loss(est.select(1, s), ref.select(1, s)));
  return out;
}

torch::Tensor spectral_convergence(const torch::Tensor &est, const torch::Tensor &ref) {
  return (ref - est).norm() / (ref.norm() + 1e-8);
}

class SdrMeter {
 public:
  void update(const torch::Tensor &est, const torch::Tensor &ref) {
    auto num = ref.pow(2).sum({2, 3});
    auto den = (ref - est).pow(2).sum({2, 3}) + 1e-8;
    auto sdr = 10.0 * torch::log10(num / den + 1e-8);
    // BUG(torch-host-sync-in-loop): the meter reads the device SDR on every
    // call, and fit() calls it on every step.
    sum_ += sdr.mean().item<double>();
    ++count_;
  }
  double mean() const { return count_ > 0 ? sum_ / static_cast<double>(count_) : 0.0; }

 private:
  double sum_ = 0.0;
  int64_t count_ = 0;
};

// Puts a module in eval mode for a scope and restores what it was.
struct ModeScope {
  explicit ModeScope(torch::nn::Module &m) : module(m), was_training(m.is_training()) { module.eval(); }
  ~ModeScope() { module.train(was_training); }
  torch::nn::Module &module;
  bool was_training;
};

class SepTrainer {
 public:
  SepTrainer(const SepConfig &cfg, torch::Device device)
      : cfg_(cfg), device_(device), opts_(net_, cls_, cfg), on_step_([](int64_t, const torch::Tensor &) {}) {
    net_->to(device_);
    cls_->to(device_);
  }
  Separator model() const { return net_; }
  void set_step_hook(std::function<void(int64_t, const torch::Tensor &)> hook) { on_step_ = std::move(hook); }

  void fit() {
    net_->train();
    l1_total_ = torch::zeros({}, device_);
    for (int64_t step = 0; step < cfg_.steps; ++step) {
      auto batch = make_batch(cfg_.batch);
      auto mix = batch.mix.to(device_), stems = batch.stems.to(device_);
      auto est = net_->forward(mix);
      auto parts = per_stem_l1(est, stems);
      auto l1 = std::accumulate(parts.begin(), parts.end(), torch::zeros({}, device_));
      auto loss = l1 + cfg_.sc_weight * spectral_convergence(est, stems);
      loss.backward();
      // BUG(torch-missing-zero-grad): zero_all() is at the end of the body,
      // and the warm-up `continue` below skips it: the next backward() adds
      // to these gradients.
      opts_.sep.step();
      // BUG(torch-loss-accumulation-graph): the std::accumulate sum of the
      // per-stem losses keeps every step's graph in the member.
      l1_total_ = l1_total_ + l1;
      for (int64_t s = 0; s < kStems; ++s)
        // BUG(torch-loss-accumulation-graph): per-stem history for the
        // report, stored with each step's graph.
        stem_history_[static_cast<size_t>(s)].push_back(parts[static_cast<size_t>(s)]);
      meter_.update(est.detach(), stems);
      on_step_(step, loss.detach());
      if (step % cfg_.log_every == 0)
        // OK(torch-host-sync-in-loop): once per logging interval.
        std::cout << "step " << step << " loss " << loss.item<double>() << " sdr " << meter_.mean() << "\n";
      if (step % cfg_.val_every == 0) std::cout << "val l1 " << validate(4) << "\n";
      if (step < cfg_.cls_warmup) continue;
      auto logits = cls_->forward(est.detach());
      auto cls_loss = F::binary_cross_entropy_with_logits(logits, batch.active.to(device_));
      cls_loss.backward();
      opts_.cls.step();
      zero_all(opts_);
    }
  }

  double validate(int64_t batches) {
    ModeScope scope(*net_);
    torch::NoGradGuard no_grad;
    double total = 0.0;
    for (int64_t b = 0; b < batches; ++b) {
      auto batch = make_batch(cfg_.batch);
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): the
      // scope put the separator in eval mode, under a NoGradGuard.
      auto est = net_->forward(batch.mix.to(device_));
      total += F::l1_loss(est, batch.stems.to(device_)).item<double>();
    }
    return total / static_cast<double>(batches);
  }

  void report() const {
    for (size_t s = 0; s < kStemNames.size(); ++s) {
      if (stem_history_[s].empty()) continue;
      std::cout << kStemNames[s] << " mean l1 " << torch::stack(stem_history_[s]).mean().item<double>() << "\n";
    }
  }

 private:
  SepConfig cfg_;
  torch::Device device_;
  Separator net_;
  StemClassifier cls_;
  Optimizers opts_;
  std::array<std::vector<torch::Tensor>, kStems> stem_history_;
  torch::Tensor l1_total_;
  SdrMeter meter_;
  std::function<void(int64_t, const torch::Tensor &)> on_step_;
};

void freeze(torch::nn::Module &m) {
  m.eval();
  for (auto &p : m.parameters()) p.requires_grad_(false);
}

std::vector<torch::Tensor> separate_track(Separator net, const torch::Tensor &track, int64_t chunk) {
  c10::InferenceMode guard;
  std::vector<torch::Tensor> pieces;
  for (int64_t t = 0; t < track.size(3); t += chunk) {
    // BUG(torch-eval-mode-missing): validate() restored training mode, so
    // the track is separated with dropout on and batch statistics.
    pieces.push_back(net->forward(track.slice(3, t, t + chunk)));
  }
  return pieces;
}

torch::Tensor preview_vocals(Separator net, const torch::Tensor &clip) {
  freeze(*net);
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): freeze() switched the module to eval mode.
  return net->forward(clip).select(1, 0);
}

int main(int argc, char **argv) {
  torch::manual_seed(269);
  SepConfig cfg;
  if (argc > 1) cfg.steps = std::stoll(argv[1]);
  // OK(torch-cuda-unguarded): the ternary checks for a GPU.
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  SepTrainer trainer(cfg, device);
  std::vector<float> progress;
  trainer.set_step_hook([&progress](int64_t, const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): (probe: std::function member) the hook
    // runs on every training step and reads the device loss.
    progress.push_back(loss.item<float>());
  });
  trainer.fit();
  trainer.report();
  std::cout << "final val l1 " << trainer.validate(16) << "\n";
  auto track = torch::rand({1, 1, kFreq, 10 * kFrames}).to(device);
  auto pieces = separate_track(trainer.model(), track, cfg.chunk);
  auto vocals = torch::cat(pieces, 3).select(1, 0);
  auto preview = preview_vocals(trainer.model(), track.slice(3, 0, kFrames));
  std::cout << "vocals energy " << vocals.pow(2).mean().item<double>() << " preview "
            << preview.pow(2).mean().item<double>() << " steps logged " << progress.size() << "\n";
  return 0;
}
