// SimCLR-style contrastive pretraining of a small conv encoder on synthetic
// 32x32 "photos": two augmented views per image, a projection head and the
// NT-Xent loss. The trainer keeps its epoch statistics in a struct member,
// runs the hooks registered from main() after every step, and computes the
// loss in float16 through a small RAII autocast scope. After pretraining, a
// feature bank of the labelled split is embedded and a linear probe is fitted
// on frozen features.
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kClasses = 10, kSide = 32;

struct EncoderImpl : torch::nn::Module {
  EncoderImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).padding(1)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(32))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(64))) {}
  // images [B, 3, 32, 32] -> features [B, 64]
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn1(conv1(x)));
    x = torch::relu(bn2(conv2(x)));
    return F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)).flatten(1);
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
};
TORCH_MODULE(Encoder);

struct ProjectorImpl : torch::nn::Module {
  ProjectorImpl()
      : fc1(register_module("fc1", torch::nn::Linear(64, 128))),
        bn(register_module("bn", torch::nn::BatchNorm1d(128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 32))) {}
  torch::Tensor forward(torch::Tensor h) { return fc2(torch::relu(bn(fc1(h)))); }
  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d bn;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Projector);

// CUDA autocast on for the scope; the destructor restores the previous state.
class HalfPrecisionScope {
public:
  HalfPrecisionScope() : was_enabled_(at::autocast::is_enabled()) { at::autocast::set_enabled(true); }
  ~HalfPrecisionScope() {
    at::autocast::set_enabled(was_enabled_);
    at::autocast::clear_cache();
  }

private:
  bool was_enabled_;
};

// Random horizontal flip, brightness jitter and pixel noise.
torch::Tensor augment(const torch::Tensor &x) {
  auto flip = torch::rand({x.size(0), 1, 1, 1}, x.options()) < 0.5;
  auto out = torch::where(flip, x.flip({3}), x);
  out = out * (0.8 + 0.4 * torch::rand({x.size(0), 1, 1, 1}, x.options()));
  return out + 0.05 * torch::randn_like(out);
}

torch::Tensor nt_xent(const torch::Tensor &z1, const torch::Tensor &z2, double tau) {
  const int64_t n = z1.size(0);
  auto z = F::normalize(torch::cat({z1, z2}), F::NormalizeFuncOptions().dim(1));
  auto self = torch::eye(2 * n, z.options()).to(torch::kBool);
  auto sim = torch::mm(z, z.t()).div(tau).masked_fill(self, -1e4);
  auto idx = torch::arange(n, z.options().dtype(torch::kLong));
  return F::cross_entropy(sim, torch::cat({idx + n, idx}));
}

struct EpochStats {
  torch::Tensor contrastive;
  int64_t steps = 0;
};

class SimClrTrainer {
public:
  SimClrTrainer(Encoder encoder, Projector projector, double tau)
      : encoder_(std::move(encoder)), projector_(std::move(projector)), tau_(tau),
        opt_(collect(encoder_, projector_), torch::optim::AdamOptions(3e-4).weight_decay(1e-6)) {}

  void on_step(std::function<void(int64_t)> hook) { hooks_.push_back(std::move(hook)); }

  void fit_epoch(const std::vector<torch::Tensor> &unlabelled) {
    encoder_->train();
    projector_->train();
    stats_ = EpochStats{torch::zeros({}, unlabelled.front().options()), 0};
    for (const auto &x : unlabelled) {
      opt_.zero_grad();
      torch::Tensor loss;
      {
        HalfPrecisionScope amp;
        // OK(torch-eval-mode-missing): train() at the top of the epoch.
        auto z1 = projector_(encoder_(augment(x)));
        auto z2 = projector_(encoder_(augment(x)));
        loss = nt_xent(z1, z2, tau_);
        log_metric("z_std", z1.std(0).mean());
      }
      // BUG(torch-autocast-region): the NT-Xent loss was computed in a
      // float16 region (no dtype chosen) and reaches backward() unscaled.
      loss.backward();
      opt_.step();
      // BUG(torch-loss-accumulation-graph): the member's field keeps every
      // step's graph alive until the next epoch.
      stats_.contrastive += loss;
      ++stats_.steps;
      for (auto &hook : hooks_)
        hook(stats_.steps);
    }
  }

  double mean_loss() const { return stats_.contrastive.item<double>() / static_cast<double>(stats_.steps); }

  // Spread of the normalised projections; near 0 means the views collapsed.
  double collapse_score(const std::vector<torch::Tensor> &held_out) {
    encoder_->eval();
    projector_->eval();
    double spread = 0;
    for (const auto &x : held_out) {
      // BUG(torch-inference-without-no-grad): eval() but no guard; autograd
      // records the whole forward of every held-out batch.
      auto z = F::normalize(projector_(encoder_(x)), F::NormalizeFuncOptions().dim(1));
      spread += z.std(0).mean().item<double>();
    }
    encoder_->train();
    projector_->train();
    return spread / static_cast<double>(held_out.size());
  }

  torch::Tensor embed(const std::vector<torch::Tensor> &images) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> feats;
    for (const auto &x : images)
      // BUG(torch-eval-mode-missing): collapse_score() switched the encoder
      // back to train(); BatchNorm normalises each bank batch with its own
      // statistics and overwrites the running ones.
      feats.push_back(encoder_(x));
    return torch::cat(feats);
  }

  Encoder &encoder() { return encoder_; }
  const std::map<std::string, torch::Tensor> &metrics() const { return metrics_; }

private:
  void log_metric(const std::string &name, const torch::Tensor &value) {
    auto it = metrics_.find(name);
    if (it == metrics_.end())
      metrics_.emplace(name, torch::zeros({}, value.options()));
    // BUG(torch-loss-accumulation-graph): fit_epoch() logs the projection
    // spread every step, still attached to its graph; the member map keeps
    // every step's graph alive.
    metrics_[name] += value;
  }

  static std::vector<torch::Tensor> collect(Encoder &e, Projector &p) {
    auto params = e->parameters();
    for (auto &q : p->parameters())
      params.push_back(q);
    return params;
  }

  Encoder encoder_;
  Projector projector_;
  double tau_;
  torch::optim::Adam opt_;
  EpochStats stats_;
  std::vector<std::function<void(int64_t)>> hooks_;
  std::map<std::string, torch::Tensor> metrics_;
};

struct Labelled {
  std::vector<torch::Tensor> images, labels;
};

// Each class tints a different quadrant of the image.
Labelled synth_labelled(int64_t batches, int64_t n, torch::Device device) {
  Labelled out;
  for (int64_t b = 0; b < batches; ++b) {
    auto y = torch::randint(kClasses, {n}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto x = 0.2 * torch::randn({n, 3, kSide, kSide}, device);
    auto tint = F::one_hot(y, kClasses).to(torch::kFloat).narrow(1, 0, 3).view({n, 3, 1, 1});
    x.narrow(2, 0, kSide / 2).add_(tint);
    out.images.push_back(x);
    out.labels.push_back(y);
  }
  return out;
}

int main() {
  torch::manual_seed(140);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  auto unlabelled = synth_labelled(48, 128, device).images;
  auto held_out = synth_labelled(4, 256, device).images;
  auto bank = synth_labelled(8, 256, device);

  Encoder encoder;
  Projector projector;
  encoder->to(device);
  projector->to(device);
  SimClrTrainer trainer(encoder, projector, 0.2);
  trainer.on_step([](int64_t step) {
    if (step % 20 == 0)
      std::cout << "step " << step << '\n';
  });
  trainer.on_step([](int64_t) {
    // BUG(torch-empty-cache-in-loop): fit_epoch() runs every hook after
    // every optimizer step.
    c10::cuda::CUDACachingAllocator::emptyCache();
  });

  for (int epoch = 0; epoch < 5; ++epoch) {
    trainer.fit_epoch(unlabelled);
    std::cout << "epoch " << epoch << " nt-xent " << trainer.mean_loss() << " spread "
              << trainer.collapse_score(held_out) << '\n';
  }

  std::cout << "summed projection spread " << trainer.metrics().at("z_std").item<double>() << '\n';
  auto features = trainer.embed(bank.images);
  auto labels = torch::cat(bank.labels);

  trainer.encoder()->eval();
  torch::Tensor probe_feats;
  {
    torch::NoGradGuard no_grad;
    // OK(torch-eval-mode-missing): eval() just above, under a guard.
    probe_feats = trainer.encoder()->forward(torch::cat(held_out));
  }
  std::cout << "probe feature norm " << probe_feats.norm().item<double>() << '\n';

  torch::nn::Linear probe(64, kClasses);
  probe->to(device);
  torch::optim::SGD probe_opt(probe->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int it = 0; it < 200; ++it) {
    probe_opt.zero_grad();
    // OK(torch-eval-mode-missing): a Linear probe has no mode-dependent layer.
    auto loss = F::cross_entropy(probe(features), labels);
    loss.backward();
    probe_opt.step();
  }
  {
    torch::NoGradGuard no_grad;
    auto acc = probe(features).argmax(1).eq(labels).to(torch::kFloat).mean();
    std::cout << "linear probe train acc " << acc.item<double>() << '\n';
  }
  // OK(torch-empty-cache-in-loop): once, after pretraining.
  c10::cuda::CUDACachingAllocator::emptyCache();
  return 0;
}
