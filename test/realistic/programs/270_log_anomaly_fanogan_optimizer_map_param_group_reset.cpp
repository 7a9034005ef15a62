// Anomaly detection in service logs with an f-AnoGAN: each window of log
// lines is a histogram over parsed event templates. A GAN learns the normal
// windows; an encoder is then fitted into the frozen generator's latent
// space (izi training), and a window's anomaly score is its reconstruction
// residual plus the discriminator's feature residual. The optimizers live in
// a map keyed by network name.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kTemplates = 64, kLatent = 16;

struct GanConfig {
  int64_t gan_steps = 5000, enc_steps = 2000, batch = 128, log_every = 250;
  double lr = 2e-4, feature_weight = 0.1;
};

struct GeneratorImpl : torch::nn::Module {
  GeneratorImpl()
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(kLatent, 128),
                                                         torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
                                                         torch::nn::Linear(128, kTemplates)))) {}
  torch::Tensor forward(const torch::Tensor &z) { return torch::softmax(net->forward(z), 1); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Generator);

struct DiscriminatorImpl : torch::nn::Module {
  DiscriminatorImpl()
      : features(register_module("features",
                                 torch::nn::Sequential(torch::nn::Linear(kTemplates, 128),
                                                       torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
                                                       torch::nn::Dropout(0.3)))),
        head(register_module("head", torch::nn::Linear(128, 1))) {}
  torch::Tensor forward(const torch::Tensor &x) { return head->forward(features->forward(x)).squeeze(1); }
  torch::Tensor feat(const torch::Tensor &x) { return features->forward(x); }
  torch::nn::Sequential features;
  torch::nn::Linear head;
};
TORCH_MODULE(Discriminator);

struct EncoderImpl : torch::nn::Module {
  EncoderImpl()
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(kTemplates, 128), torch::nn::ReLU(),
                                                         torch::nn::Linear(128, kLatent), torch::nn::Tanh()))) {}
  torch::Tensor forward(const torch::Tensor &x) { return net->forward(x); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Encoder);

// Synthetic template histograms: normal traffic follows a fixed mix; an
// incident concentrates mass on a few rare templates.
class LogWindowSource {
 public:
  LogWindowSource() : base_(torch::softmax(torch::randn({kTemplates}) * 2.0, 0)) {}
  torch::Tensor normal(int64_t n) const {
    auto counts = torch::poisson(base_.expand({n, kTemplates}) * 200.0);
    return counts / counts.sum(1, true).clamp_min(1.0);
  }
  torch::Tensor incidents(int64_t n) const {
    auto w = normal(n);
    w.slice(1, kTemplates - 4).add_(0.2);
    return w / w.sum(1, true);
  }

 private:
  torch::Tensor base_;
};

void zero_param_groups(torch::optim::Optimizer &opt) {
  for (auto &group : opt.param_groups())
    for (auto &p : group.params())
      if (p.grad().defined()) p.grad().zero_();
}

struct DiscOut {
  torch::Tensor loss, real_acc, fake_acc;
};

template <typename D>
DiscOut discriminator_loss(D &disc, const torch::Tensor &real, const torch::Tensor &fake) {
  auto real_logits = disc->forward(real);
  auto fake_logits = disc->forward(fake);
  auto loss = F::binary_cross_entropy_with_logits(real_logits, torch::ones_like(real_logits)) +
              F::binary_cross_entropy_with_logits(fake_logits, torch::zeros_like(fake_logits));
  return {loss, (real_logits > 0).to(torch::kFloat).mean(), (fake_logits < 0).to(torch::kFloat).mean()};
}

// Running sum of a quantity over a phase.
template <typename T>
class Running {
 public:
  explicit Running(T init) : sum_(std::move(init)) {}
  void add(const T &v) {
    // BUG(torch-loss-accumulation-graph): instantiated with the generator's
    // feature-matching term, which still holds its graph.
    sum_ += v;
    ++n_;
  }
  T mean() const { return sum_ / static_cast<double>(n_ > 0 ? n_ : 1); }

 private:
  T sum_;
  int64_t n_ = 0;
};

struct Nets {
  Generator gen;
  Discriminator disc;
  Encoder enc;
};

class LogAnomalyDetector {
 public:
  LogAnomalyDetector(const GanConfig &cfg, torch::Device device) : cfg_(cfg), device_(device) {
    nets_.gen->to(device_);
    nets_.disc->to(device_);
    nets_.enc->to(device_);
    auto adam = torch::optim::AdamOptions(cfg.lr).betas(std::make_tuple(0.5, 0.999));
    opts_["gen"] = std::make_unique<torch::optim::Adam>(nets_.gen->parameters(), adam);
    opts_["disc"] = std::make_unique<torch::optim::Adam>(nets_.disc->parameters(), adam);
  }

  void fit_gan(const LogWindowSource &src) {
    std::map<std::string, torch::Tensor> totals{{"d", torch::zeros({}, device_)}, {"g", torch::zeros({}, device_)}};
    std::vector<double> d_acc_trace;
    Running<torch::Tensor> feature_match(torch::zeros({}, device_));
    auto &opt_d = *opts_.at("disc");
    auto &opt_g = *opts_.at("gen");
    for (int64_t step = 0; step < cfg_.gan_steps; ++step) {
      auto real = src.normal(cfg_.batch).to(device_);
      auto z = torch::randn({cfg_.batch, kLatent}, torch::TensorOptions().device(device_));
      auto fake = nets_.gen->forward(z);
      zero_param_groups(opt_d);
      auto d = discriminator_loss(nets_.disc, real, fake.detach());
      d.loss.backward();
      // BUG(torch-missing-zero-grad): only the discriminator is reset; the
      // generator's backward() below runs after this step with nothing reset,
      // so the generator's gradients pile up over the whole run.
      opt_d.step();
      auto fake_logits = nets_.disc->forward(fake);
      auto fm = (nets_.disc->feat(real).mean(0) - nets_.disc->feat(fake).mean(0)).pow(2).mean();
      auto g_loss = F::binary_cross_entropy_with_logits(fake_logits, torch::ones_like(fake_logits)) + fm;
      g_loss.backward();
      // OK(torch-missing-zero-grad): the discriminator's reset at the top of
      // the next iteration counts before its backward().
      opt_g.step();
      feature_match.add(fm);
      // BUG(torch-loss-accumulation-graph): the map element outlives the
      // loop and keeps each generator step's graph.
      totals["g"] += g_loss;
      // OK(torch-loss-accumulation-graph): detached.
      totals["d"] += d.loss.detach();
      // BUG(torch-host-sync-in-loop): the discriminator accuracy from the
      // template helper is read on every step.
      d_acc_trace.push_back(d.real_acc.item<double>());
      if (step % cfg_.log_every == 0)
        // OK(torch-host-sync-in-loop): logging interval only.
        std::cout << "gan step " << step << " d " << d.loss.item<double>() << " g " << g_loss.item<double>()
                  << " fake acc " << d.fake_acc.item<double>() << "\n";
    }
    std::cout << "mean d " << (totals["d"] / cfg_.gan_steps).item<double>() << " last real acc "
              << (d_acc_trace.empty() ? 0.0 : d_acc_trace.back()) << " feature match "
              << feature_match.mean().item<double>() << "\n";
  }

  void fit_encoder(const LogWindowSource &src) {
    for (auto &p : nets_.gen->parameters()) p.requires_grad_(false);
    torch::optim::Adam opt_e(nets_.enc->parameters(), torch::optim::AdamOptions(cfg_.lr));
    torch::Tensor residual_sum = torch::zeros({}, device_);
    auto track = [&residual_sum](const torch::Tensor &r) {
      // BUG(torch-loss-accumulation-graph): the lambda adds each step's loss,
      // graph and all, to the sum it captured by reference.
      residual_sum += r;
    };
    for (int64_t step = 0; step < cfg_.enc_steps; ++step) {
      nets_.enc->zero_grad();
      auto x = src.normal(cfg_.batch).to(device_);
      auto recon = nets_.gen->forward(nets_.enc->forward(x));
      auto loss = F::mse_loss(recon, x);
      loss.backward();
      // OK(torch-missing-zero-grad): the encoder module's zero_grad() covers
      // every parameter this optimizer updates.
      opt_e.step();
      track(loss);
    }
    std::cout << "izi residual " << (residual_sum / cfg_.enc_steps).item<double>() << "\n";
  }

  torch::Tensor score(const torch::Tensor &windows) {
    torch::NoGradGuard no_grad;
    nets_.gen->eval();
    nets_.enc->eval();
    auto x = windows.to(device_);
    auto recon = nets_.gen->forward(nets_.enc->forward(x));
    auto residual = (recon - x).pow(2).sum(1);
    // BUG(torch-eval-mode-missing): the discriminator was left in training
    // mode; its dropout makes the feature residual random.
    auto feat_res = (nets_.disc->feat(recon) - nets_.disc->feat(x)).pow(2).mean(1);
    return (residual + cfg_.feature_weight * feat_res).cpu();
  }

 private:
  GanConfig cfg_;
  torch::Device device_;
  Nets nets_;
  std::map<std::string, std::unique_ptr<torch::optim::Optimizer>> opts_;
};

torch::Device pick_device() {
  if (!torch::cuda::is_available()) return torch::kCPU;
  // OK(torch-cuda-unguarded, torch-device-index-unchecked): checked above;
  // ordinal 0 always exists.
  return torch::Device(torch::kCUDA, 0);
}

int main() {
  torch::manual_seed(270);
  GanConfig cfg;
  LogWindowSource src;
  LogAnomalyDetector det(cfg, pick_device());
  det.fit_gan(src);
  det.fit_encoder(src);
  auto normal_scores = det.score(src.normal(1024));
  const double threshold = normal_scores.quantile(0.99).item<double>();
  auto incident_scores = det.score(src.incidents(256));
  const double recall = (incident_scores > threshold).to(torch::kFloat).mean().item<double>();
  std::cout << "threshold " << threshold << " incident recall " << recall << "\n";
  return 0;
}
