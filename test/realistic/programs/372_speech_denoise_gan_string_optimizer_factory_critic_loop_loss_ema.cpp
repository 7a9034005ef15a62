// Speech denoising GAN for a hearing-aid vendor (SEGAN-style): a 1-D conv
// encoder-decoder generator maps one second of noisy 16 kHz audio to clean
// speech, a conv discriminator scores (noisy, candidate) pairs with a
// least-squares GAN loss. The optimizers come from a factory keyed by the
// names in the experiment config; the generator is pretrained with an L1
// loss over accumulated micro-batches, trained adversarially with two critic
// updates per generator update, and adapted to babble noise from the
// cafeteria recordings. Losses are smoothed with an exponential moving
// average for the dashboard. LibTorch 1.13 and 2.x.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kSamples = 16384;

F::LeakyReLUFuncOptions leaky() { return F::LeakyReLUFuncOptions().negative_slope(0.3); }

struct GeneratorImpl : nn::Module {
  GeneratorImpl()
      : enc1(register_module("enc1", nn::Conv1d(nn::Conv1dOptions(1, 16, 31).stride(2).padding(15)))),
        enc2(register_module("enc2", nn::Conv1d(nn::Conv1dOptions(16, 32, 31).stride(2).padding(15)))),
        dec2(register_module("dec2", nn::ConvTranspose1d(nn::ConvTranspose1dOptions(32, 16, 32).stride(2).padding(15)))),
        dec1(register_module("dec1", nn::ConvTranspose1d(nn::ConvTranspose1dOptions(32, 1, 32).stride(2).padding(15)))) {}
  // noisy [B, 1, 16384] -> enhanced [B, 1, 16384]
  torch::Tensor forward(const torch::Tensor& noisy) {
    auto e1 = F::leaky_relu(enc1->forward(noisy), leaky());
    auto e2 = F::leaky_relu(enc2->forward(e1), leaky());
    auto d2 = F::leaky_relu(dec2->forward(e2), leaky());
    return torch::tanh(dec1->forward(torch::cat({d2, e1}, 1)));
  }
  nn::Conv1d enc1, enc2;
  nn::ConvTranspose1d dec2, dec1;
};
TORCH_MODULE(Generator);

struct DiscriminatorImpl : nn::Module {
  DiscriminatorImpl()
      : convs(register_module("convs", nn::Sequential(
                  nn::Conv1d(nn::Conv1dOptions(2, 16, 31).stride(4).padding(15)), nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.3)),
                  nn::Conv1d(nn::Conv1dOptions(16, 32, 31).stride(4).padding(15)), nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.3))))),
        out(register_module("out", nn::Linear(32, 1))) {}
  // (noisy, candidate) -> realness score [B, 1]
  torch::Tensor forward(const torch::Tensor& noisy, const torch::Tensor& candidate) {
    return out->forward(convs->forward(torch::cat({noisy, candidate}, 1)).mean(2));
  }
  nn::Sequential convs;
  nn::Linear out;
};
TORCH_MODULE(Discriminator);

struct AudioBatch {
  torch::Tensor noisy, clean;  // [B, 1, 16384]
};

AudioBatch make_batch(int64_t n, torch::Device device) {
  auto clean = 0.3 * torch::randn({n, 1, kSamples}, device);
  return {clean + 0.1 * torch::randn({n, 1, kSamples}, device), clean};
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& kind, std::vector<torch::Tensor> params, double lr) {
  if (kind == "adam")
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(lr).betas(std::make_tuple(0.5, 0.999)));
  if (kind == "rmsprop") return std::make_unique<torch::optim::RMSprop>(params, torch::optim::RMSpropOptions(lr));
  throw std::invalid_argument("unknown optimizer '" + kind + "'");
}

// Bias-corrected exponential moving average for the dashboard curves.
class LossEma {
 public:
  explicit LossEma(double decay) : decay_(decay) {}
  void update(const torch::Tensor& x) {
    if (!value_.defined()) value_ = torch::zeros_like(x);
    // BUG(torch-loss-accumulation-graph): DenoiseGan passes the critic's
    // d_loss undetached on every critic step; value_ keeps every graph.
    value_ += (1.0 - decay_) * (x - value_);
    ++count_;
  }
  double value() const { return value_.item<double>() / (1.0 - std::pow(decay_, static_cast<double>(count_))); }

 private:
  double decay_;
  torch::Tensor value_;
  int64_t count_ = 0;
};

torch::Tensor reconstruction_loss(Generator& gen, const AudioBatch& b) { return F::l1_loss(gen->forward(b.noisy), b.clean); }

// L1 pretraining; micro-batches of 4 utterances, one update per `accum`.
void pretrain_generator(Generator& gen, torch::optim::Optimizer& opt, const std::vector<AudioBatch>& data, int64_t accum) {
  gen->train();
  opt.zero_grad();
  for (size_t i = 0; i < data.size(); ++i) {
    auto loss = reconstruction_loss(gen, data[i]);
    // BUG(torch-grad-accumulation-unscaled): the helper's mean L1 loss adds
    // up over `accum` micro-batches before each step and is never divided.
    loss.backward();
    if (static_cast<int64_t>(i + 1) % accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}

struct GanConfig {
  std::string g_optimizer = "adam", d_optimizer = "rmsprop";
  double g_lr = 2e-4, d_lr = 1e-4;
  int64_t critic_steps = 2;
  double l1_weight = 100.0;
  int64_t log_every = 50;
};

struct EpochLog {
  std::vector<torch::Tensor> adversarial, l1;
};

class DenoiseGan {
 public:
  DenoiseGan(Generator gen, Discriminator disc, const GanConfig& cfg)
      : gen_(std::move(gen)), disc_(std::move(disc)), cfg_(cfg),
        g_opt_(make_optimizer(cfg.g_optimizer, gen_->parameters(), cfg.g_lr)),
        d_opt_(make_optimizer(cfg.d_optimizer, disc_->parameters(), cfg.d_lr)) {}

  void train_epoch(const std::vector<AudioBatch>& data) {
    gen_->train();
    disc_->train();
    log_.adversarial.clear();
    log_.l1.clear();
    int64_t step = 0;
    for (const auto& b : data) {
      d_opt_->zero_grad();
      for (int64_t k = 0; k < cfg_.critic_steps; ++k) {
        torch::Tensor fake;
        {
          torch::NoGradGuard no_grad;
          fake = gen_->forward(b.noisy);
        }
        auto real_score = disc_->forward(b.noisy, b.clean);
        auto fake_score = disc_->forward(b.noisy, fake);
        auto d_loss = 0.5 * ((real_score - 1.0).pow(2).mean() + fake_score.pow(2).mean());
        d_loss.backward();
        // BUG(torch-missing-zero-grad): d_opt_->zero_grad() sits before the
        // critic loop; the second critic step applies both steps' gradients.
        d_opt_->step();
        d_ema_.update(d_loss);
      }

      g_opt_->zero_grad();
      auto enhanced = gen_->forward(b.noisy);
      auto adv = (disc_->forward(b.noisy, enhanced) - 1.0).pow(2).mean();
      auto l1 = F::l1_loss(enhanced, b.clean);
      auto g_loss = 0.5 * adv + cfg_.l1_weight * l1;
      g_loss.backward();
      // OK(torch-missing-zero-grad): the generator's gradients are reset
      // right before its own backward.
      g_opt_->step();
      // OK(torch-loss-accumulation-graph): detached by the caller.
      g_ema_.update(g_loss.detach());
      // BUG(torch-loss-accumulation-graph): the adversarial term is a
      // discriminator output; log_ is a member that lives for the epoch.
      log_.adversarial.push_back(adv);
      // OK(torch-loss-accumulation-graph): detached.
      log_.l1.push_back(l1.detach());
      if (++step % cfg_.log_every == 0)
        std::cout << "step " << step << " D " << d_ema_.value() << " G " << g_ema_.value() << '\n';
    }
  }

  double mean_adversarial() const { return torch::stack(log_.adversarial).mean().item<double>(); }

 private:
  Generator gen_;
  Discriminator disc_;
  GanConfig cfg_;
  std::unique_ptr<torch::optim::Optimizer> g_opt_, d_opt_;
  LossEma g_ema_{0.98}, d_ema_{0.98};
  EpochLog log_;
};

// Fine-tunes on the cafeteria's babble noise; returns the mean L1.
torch::Tensor adapt_to_babble(Generator& gen, const std::vector<AudioBatch>& babble, const std::string& opt_kind) {
  gen->train();
  auto opt = make_optimizer(opt_kind, gen->parameters(), 5e-5);
  auto update = [&](const AudioBatch& b) {
    opt->zero_grad();
    auto loss = reconstruction_loss(gen, b);
    loss.backward();
    // OK(torch-missing-zero-grad): the lambda resets before every backward.
    opt->step();
    return loss;
  };
  auto running = torch::zeros({}, babble.front().noisy.options());
  for (const auto& b : babble) {
    // BUG(torch-loss-accumulation-graph): the lambda returns the loss it
    // just backpropagated, graph and all.
    running = running + update(b);
  }
  return running / static_cast<double>(babble.size());
}

// Scale-invariant SNR in dB, averaged over the set.
double validate_si_snr(Generator& gen, const std::vector<AudioBatch>& data) {
  torch::NoGradGuard no_grad;
  gen->eval();
  double total = 0.0;
  for (const auto& b : data) {
    auto est = gen->forward(b.noisy).flatten(1);
    auto ref = b.clean.flatten(1);
    auto proj = (est * ref).sum(1, true) / (ref.pow(2).sum(1, true) + 1e-8) * ref;
    auto snr = 10.0 * torch::log10(proj.pow(2).sum(1) / ((est - proj).pow(2).sum(1) + 1e-8));
    // OK(torch-loss-accumulation-graph): a host double under the guard.
    total += snr.mean().item<double>();
  }
  return total / static_cast<double>(data.size());
}

int main() {
  torch::manual_seed(372);
  // OK(torch-cuda-unguarded): guarded selection.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Generator gen;
  Discriminator disc;
  gen->to(device);
  disc->to(device);

  std::vector<AudioBatch> train, babble, valid;
  for (int i = 0; i < 64; ++i) train.push_back(make_batch(4, device));
  for (int i = 0; i < 16; ++i) babble.push_back(make_batch(4, device));
  for (int i = 0; i < 8; ++i) valid.push_back(make_batch(4, device));

  GanConfig cfg;
  auto pre_opt = make_optimizer("adam", gen->parameters(), 1e-3);
  pretrain_generator(gen, *pre_opt, train, 4);
  std::cout << "pretrained SI-SNR " << validate_si_snr(gen, valid) << " dB\n";

  DenoiseGan gan(gen, disc, cfg);
  for (int epoch = 0; epoch < 3; ++epoch) {
    gan.train_epoch(train);
    // OK(torch-host-sync-in-loop): once per epoch; the batch loop that
    // trains is inside train_epoch().
    std::cout << "epoch " << epoch << " adv " << gan.mean_adversarial() << " SI-SNR " << validate_si_snr(gen, valid) << " dB\n";
  }
  auto babble_l1 = adapt_to_babble(gen, babble, cfg.g_optimizer);
  std::cout << "babble L1 " << babble_l1.item<double>() << ", SI-SNR " << validate_si_snr(gen, valid) << " dB\n";
}
