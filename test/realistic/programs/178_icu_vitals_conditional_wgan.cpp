// Synthetic ICU vital signs for a data-sharing agreement: a conditional
// WGAN-GP (CTGAN-style generator with batch-norm blocks, critic with
// dropout) learns 12 standardised vital-sign columns given one of 8
// admission diagnoses. A base class owns both optimizers and the critic /
// generator schedule and calls the virtual d_step()/g_step(); the
// gradient-penalty variant overrides them. Exported rows go through a
// member list of post-processing lambdas (de-standardise, clamp).
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kCols = 12, kDiagnoses = 8, kNoise = 64;

#define CHECK_FINITE(value, what)                                          \
  if (!std::isfinite(value)) {                                             \
    std::cerr << "non-finite " << what << " at step " << step_ << '\n';    \
    continue;                                                              \
  }

struct GeneratorImpl : nn::Module {
  explicit GeneratorImpl(int64_t hidden) {
    net = register_module("net", nn::Sequential(nn::Linear(kNoise + kDiagnoses, hidden), nn::BatchNorm1d(hidden),
                                                nn::ReLU(), nn::Linear(hidden, hidden), nn::BatchNorm1d(hidden),
                                                nn::ReLU(), nn::Linear(hidden, kCols)));
  }
  torch::Tensor forward(const torch::Tensor& z, const torch::Tensor& cond) {
    return net->forward(torch::cat({z, cond}, 1));
  }
  nn::Sequential net{nullptr};
};
TORCH_MODULE(Generator);

struct CriticImpl : nn::Module {
  explicit CriticImpl(int64_t hidden) {
    net = register_module(
        "net", nn::Sequential(nn::Linear(kCols + kDiagnoses, hidden), nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
                              nn::Dropout(0.5), nn::Linear(hidden, hidden),
                              nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)), nn::Dropout(0.5),
                              nn::Linear(hidden, 1)));
  }
  torch::Tensor forward(const torch::Tensor& rows, const torch::Tensor& cond) {
    return net->forward(torch::cat({rows, cond}, 1));
  }
  nn::Sequential net{nullptr};
};
TORCH_MODULE(Critic);

torch::Tensor one_hot_diagnoses(const torch::Tensor& codes) {
  return F::one_hot(codes, kDiagnoses).to(torch::kFloat);
}

class GanTrainer {
 public:
  GanTrainer(Generator g, Critic d, torch::Device device, double lr, int64_t n_critic)
      : G(std::move(g)), D(std::move(d)), device_(device), n_critic_(n_critic),
        g_opt_(G->parameters(), torch::optim::AdamOptions(lr).betas(std::make_tuple(0.5, 0.9))),
        d_opt_(D->parameters(), torch::optim::AdamOptions(lr).betas(std::make_tuple(0.5, 0.9))),
        g_loss_sum_(torch::zeros({}, torch::TensorOptions().device(device))) {}
  virtual ~GanTrainer() = default;

  void fit(const torch::Tensor& rows, const torch::Tensor& codes, int64_t epochs, int64_t batch) {
    G->train();
    D->train();
    const int64_t n = rows.size(0);
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      auto perm = torch::randperm(n, torch::TensorOptions().dtype(torch::kLong).device(rows.device()));
      for (int64_t i = 0; i + batch <= n; i += batch) {
        auto idx = perm.slice(0, i, i + batch);
        auto real = rows.index_select(0, idx);
        auto cond = one_hot_diagnoses(codes.index_select(0, idx));
        const double w_dist = d_step(real, cond);
        CHECK_FINITE(w_dist, "critic loss");
        if (++step_ % n_critic_ == 0)
          g_step(cond);
      }
      // OK(torch-host-sync-in-loop): once per epoch, after the batch loop.
      std::cout << "epoch " << epoch << " mean G loss " << g_loss_sum_.item<double>() / static_cast<double>(g_steps_)
                << '\n';
    }
  }

  Generator G;
  Critic D;

 protected:
  // Returns the critic's estimate of the Wasserstein distance for logging.
  virtual double d_step(const torch::Tensor& real, const torch::Tensor& cond) = 0;
  virtual void g_step(const torch::Tensor& cond) = 0;

  torch::Device device_;
  int64_t n_critic_;
  int64_t step_ = 0, g_steps_ = 0;
  torch::optim::Adam g_opt_, d_opt_;
  torch::Tensor g_loss_sum_;
};

class WganGpTrainer : public GanTrainer {
 public:
  WganGpTrainer(Generator g, Critic d, torch::Device device, double lambda_gp)
      : GanTrainer(std::move(g), std::move(d), device, 1e-4, 5), lambda_gp_(lambda_gp) {}

 protected:
  double d_step(const torch::Tensor& real, const torch::Tensor& cond) override {
    auto z = torch::randn({real.size(0), kNoise}, real.options());
    // OK(torch-eval-mode-missing): detached, inside the training loop; the
    // generator is meant to be in training mode here.
    auto fake = G->forward(z, cond).detach();
    auto alpha = torch::rand({real.size(0), 1}, real.options());
    auto mixed = (alpha * real + (1.0 - alpha) * fake).requires_grad_(true);
    auto score = D->forward(mixed, cond);
    auto grads = torch::autograd::grad({score}, {mixed}, {torch::ones_like(score)}, true, true)[0];
    auto gp = (grads.norm(2, 1) - 1.0).pow(2).mean();
    auto w_dist = D->forward(real, cond).mean() - D->forward(fake, cond).mean();
    auto d_loss = -w_dist + lambda_gp_ * gp;
    d_opt_.zero_grad();
    d_loss.backward();
    d_opt_.step();
    // BUG(torch-host-sync-in-loop): fit() calls d_step() on every batch; the
    // scalar comes back to the host each time, only to feed CHECK_FINITE.
    return w_dist.item<double>();
  }

  void g_step(const torch::Tensor& cond) override {
    auto z = torch::randn({cond.size(0), kNoise}, cond.options());
    g_opt_.zero_grad();
    // OK(torch-device-mismatch): z takes the options of cond, on the device.
    auto g_loss = -D->forward(G->forward(z, cond), cond).mean();
    g_loss.backward();
    g_opt_.step();
    // BUG(torch-loss-accumulation-graph): the live generator loss is added
    // to a member that outlives every step; each graph stays reachable.
    g_loss_sum_ += g_loss;
    ++g_steps_;
  }

 private:
  double lambda_gp_;
};

class Exporter {
 public:
  using PostStep = std::function<torch::Tensor(const torch::Tensor&)>;

  Exporter(Generator g, torch::Device device) : G_(std::move(g)), device_(device) {}
  void then(PostStep step) { post_.push_back(std::move(step)); }

  // Rows for one diagnosis, de-standardised and post-processed.
  torch::Tensor sample(int64_t n, int64_t code) {
    torch::NoGradGuard no_grad;
    G_->eval();
    auto codes = torch::full({n}, code, torch::TensorOptions().dtype(torch::kLong).device(device_));
    auto z = torch::randn({n, kNoise});
    // BUG(torch-device-mismatch): z is drawn on the CPU while the generator
    // and the diagnosis codes are on device_.
    auto rows = G_->forward(z, one_hot_diagnoses(codes));
    for (auto& step : post_)
      rows = step(rows);
    return rows.cpu();
  }

 private:
  Generator G_;
  torch::Device device_;
  std::vector<PostStep> post_;
};

// Distance to the closest real record: synthetic rows that copy a patient fail the agreement.
double min_distance_to_real(Generator& G, const torch::Tensor& rows, const torch::Tensor& codes) {
  torch::NoGradGuard no_grad;
  auto z = torch::randn({1024, kNoise}, rows.options());
  auto cond = one_hot_diagnoses(codes.slice(0, 0, 1024));
  // BUG(torch-eval-mode-missing): main() calls this straight after fit();
  // the generator's batch norms still use batch statistics and update theirs.
  auto synth = G->forward(z, cond);
  return torch::cdist(synth, rows).min().item<double>();
}

int main() {
  torch::manual_seed(178);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;

  const int64_t n = 20000;
  auto codes_cpu = torch::randint(kDiagnoses, {n}, torch::kLong);
  auto raw = 70.0 + 8.0 * torch::randn({n, kCols}) + codes_cpu.unsqueeze(1).to(torch::kFloat);
  auto col_mean = raw.mean(0), col_std = raw.std(0);
  auto rows = ((raw - col_mean) / col_std).to(device);
  auto codes = codes_cpu.to(device);

  WganGpTrainer trainer(Generator(256), Critic(256), device, 10.0);
  trainer.G->to(device);
  trainer.D->to(device);
  trainer.fit(rows, codes, 30, 500);

  std::cout << "closest synthetic-to-real distance " << min_distance_to_real(trainer.G, rows, codes) << '\n';

  Exporter exporter(trainer.G, device);
  auto mean_dev = col_mean.to(device), std_dev = col_std.to(device);
  // OK(torch-device-mismatch): the column statistics were moved next to the rows.
  exporter.then([mean_dev, std_dev](const torch::Tensor& x) { return x * std_dev + mean_dev; });
  exporter.then([](const torch::Tensor& x) { return x.clamp(20.0, 220.0); });
  for (int64_t code = 0; code < kDiagnoses; ++code) {
    auto table = exporter.sample(2500, code);
    torch::save(table, "synthetic_dx" + std::to_string(code) + ".pt");
  }
}
