// Generates one-bar drum patterns (16 steps x 8 instruments, a hit
// probability per cell) with a small GAN. The generator is a plain MLP; the
// critic has Dropout, as usual for a GAN critic on tiny data. Training runs
// in a do-while loop over a fixed number of updates with two Adam
// optimizers; gradient resets go through a helper that takes the optimizer
// by reference. A second phase steers the generator towards one genre's
// average groove with gradient accumulation, and the critic's acceptance of
// held-out real bars is reported at the end.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kSteps = 16;
constexpr int64_t kInstruments = 8;
constexpr int64_t kCells = kSteps * kInstruments;
constexpr int64_t kLatent = 32;

struct GeneratorImpl : torch::nn::Module {
  GeneratorImpl()
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(kLatent, 256), torch::nn::ReLU(),
                                                         torch::nn::Linear(256, kCells), torch::nn::Sigmoid()))) {}
  torch::Tensor forward(torch::Tensor z) { return net->forward(z); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Generator);

struct CriticImpl : torch::nn::Module {
  CriticImpl()
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(kCells, 256), torch::nn::LeakyReLU(),
                                                         torch::nn::Dropout(0.3), torch::nn::Linear(256, 1)))) {}
  torch::Tensor forward(torch::Tensor bars) { return net->forward(bars); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Critic);

struct GanConfig {
  int64_t updates = 3000;
  int64_t batch = 64;
  int64_t log_every = 250;
  int64_t accum = 4;
  int64_t steer_batches = 30;
};

// Kick on 1 and 9, snare on 5 and 13, hats on every other step, plus noise.
torch::Tensor real_bars(int64_t n, torch::Device device) {
  auto opts = torch::TensorOptions().device(device);
  auto grid = torch::zeros({kInstruments, kSteps}, opts);
  grid.select(0, 0).index_fill_(0, torch::tensor({0, 8}, opts.dtype(torch::kLong)), 1.0);
  grid.select(0, 1).index_fill_(0, torch::tensor({4, 12}, opts.dtype(torch::kLong)), 1.0);
  grid.select(0, 2).index_fill_(0, torch::arange(0, kSteps, 2, opts.dtype(torch::kLong)), 1.0);
  auto probs = (0.85 * grid + 0.05).flatten().unsqueeze(0).expand({n, kCells});
  return torch::bernoulli(probs);
}

void reset(torch::optim::Optimizer &opt) { opt.zero_grad(); }

void train_gan(Generator &gen, Critic &critic, const GanConfig &cfg, torch::Device device) {
  gen->train();
  critic->train();
  torch::optim::Adam opt_g(gen->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  torch::optim::Adam opt_d(critic->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  auto ones = torch::ones({cfg.batch, 1}, device);
  auto zeros = torch::zeros({cfg.batch, 1}, device);
  int64_t update = 0;
  do {
    auto real = real_bars(cfg.batch, device);
    auto fake = gen->forward(torch::randn({cfg.batch, kLatent}, device));

    reset(opt_d);
    auto d_loss = torch::binary_cross_entropy_with_logits(critic->forward(real), ones) +
                  torch::binary_cross_entropy_with_logits(critic->forward(fake.detach()), zeros);
    d_loss.backward();
    // BUG(torch-missing-zero-grad): opt_g is never reset: from this step the
    // generator's backward() below runs with no reset on the path, so each
    // generator update re-applies all earlier ones' gradients.
    opt_d.step();

    // OK(torch-eval-mode-missing): the critic trains here; its output
    // reaches g_loss.backward().
    auto g_loss = torch::binary_cross_entropy_with_logits(critic->forward(fake), ones);
    g_loss.backward();
    opt_g.step();

    if (update % cfg.log_every == 0) {
      // OK(torch-host-sync-in-loop): logged every log_every updates.
      std::cout << "update " << update << " d " << d_loss.item<double>() << " g " << g_loss.item<double>() << '\n';
      torch::NoGradGuard no_grad;
      // OK(torch-eval-mode-missing): the generator has no Dropout or
      // BatchNorm; its mode changes nothing.
      auto preview = gen->forward(torch::randn({4, kLatent}, device));
      std::cout << "  mean hit rate " << preview.mean().item<double>() << '\n';
    }
  } while (++update < cfg.updates);
}

// Steers the generator's average bar towards a genre's groove, accumulating
// cfg.accum batches of noise per update; the last partial group is flushed.
torch::Tensor steer_loss(Generator &gen, const torch::Tensor &groove, const GanConfig &cfg, torch::Device device) {
  auto bars = gen->forward(torch::randn({cfg.batch, kLatent}, device));
  return torch::mse_loss(bars.mean(0), groove) / static_cast<double>(cfg.accum);
}

void steer_to_genre(Generator &gen, const torch::Tensor &groove, const GanConfig &cfg, torch::Device device) {
  gen->train();
  torch::optim::Adam opt(gen->parameters(), torch::optim::AdamOptions(1e-4));
  auto clear = [&opt] { opt.zero_grad(); };
  clear();
  const int64_t n = cfg.steer_batches;
  for (int64_t i = 0; i < n; ++i) {
    auto loss = steer_loss(gen, groove, cfg, device);
    // OK(torch-grad-accumulation-unscaled): steer_loss() divides the mean
    // loss by cfg.accum before it returns it.
    loss.backward();
    if ((i + 1) % cfg.accum == 0 || i + 1 == n) {
      // OK(torch-missing-zero-grad): the lambda resets right after the step,
      // under the same condition.
      opt.step();
      clear();
    }
  }
}

double critic_acceptance(Critic &critic, const torch::Tensor &bars) {
  torch::NoGradGuard no_grad;
  // BUG(torch-eval-mode-missing): train_gan() left the critic in train();
  // main() never calls critic->eval(), so Dropout perturbs the scores.
  auto scores = torch::sigmoid(critic->forward(bars));
  return (scores > 0.5).to(torch::kFloat).mean().item<double>();
}

int main() {
  torch::manual_seed(126);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Generator gen;
  Critic critic;
  gen->to(device);
  critic->to(device);
  GanConfig cfg;
  train_gan(gen, critic, cfg, device);

  auto groove = real_bars(512, device).mean(0).roll(2);
  steer_to_genre(gen, groove, cfg, device);

  std::cout << "critic accepts " << critic_acceptance(critic, real_bars(256, device)) << " of held-out bars\n";
  torch::NoGradGuard no_grad;
  gen->eval();
  auto bar = (gen->forward(torch::randn({1, kLatent}, device)) > 0.5).view({kInstruments, kSteps});
  std::cout << bar.to(torch::kInt).cpu() << '\n';
}
