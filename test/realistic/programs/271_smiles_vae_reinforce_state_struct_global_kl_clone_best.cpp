// Molecule generation with a SMILES VAE: a GRU encoder/decoder with word
// dropout and KL annealing, then a REINFORCE fine-tune of the decoder toward
// a host-side property score, and sampling from the prior. The best
// checkpoint (by validation reconstruction) is kept as a clone.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kVocab = 40, kMaxLen = 48, kEmb = 64, kHid = 256, kLatent = 56, kBos = 1;

struct MolVAEImpl : torch::nn::Cloneable<MolVAEImpl> {
  MolVAEImpl() { reset(); }
  void reset() override {
    embed = register_module("embed", torch::nn::Embedding(kVocab, kEmb));
    word_drop = register_module("word_drop", torch::nn::Dropout(0.2));
    enc = register_module("enc", torch::nn::GRU(torch::nn::GRUOptions(kEmb, kHid).batch_first(true)));
    to_mu = register_module("to_mu", torch::nn::Linear(kHid, kLatent));
    to_logvar = register_module("to_logvar", torch::nn::Linear(kHid, kLatent));
    to_h = register_module("to_h", torch::nn::Linear(kLatent, kHid));
    dec = register_module("dec", torch::nn::GRUCell(kEmb, kHid));
    out = register_module("out", torch::nn::Linear(kHid, kVocab));
  }
  std::pair<torch::Tensor, torch::Tensor> encode(const torch::Tensor &x) {
    auto h = std::get<1>(enc->forward(embed->forward(x))).squeeze(0);
    return {to_mu->forward(h), to_logvar->forward(h)};
  }
  torch::Tensor latent_to_hidden(const torch::Tensor &z) { return torch::tanh(to_h->forward(z)); }
  std::pair<torch::Tensor, torch::Tensor> decode_step(const torch::Tensor &tok, const torch::Tensor &h) {
    auto h2 = dec->forward(word_drop->forward(embed->forward(tok)), h);
    return {out->forward(h2), h2};
  }
  // Teacher forcing: x [B, L] -> logits [B, L - 1, V], mu, logvar.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> forward(const torch::Tensor &x) {
    auto [mu, logvar] = encode(x);
    auto h = latent_to_hidden(mu + torch::randn_like(mu) * (0.5 * logvar).exp());
    std::vector<torch::Tensor> steps;
    for (int64_t t = 0; t + 1 < x.size(1); ++t) {
      // OK(torch-inference-without-no-grad): the training loss
      // backpropagates through every decoding step.
      auto [logits, h2] = decode_step(x.select(1, t), h);
      h = h2;
      // OK(torch-loss-accumulation-graph): stacked into this forward's output.
      steps.push_back(logits);
    }
    return {torch::stack(steps, 1), mu, logvar};
  }
  torch::nn::Embedding embed{nullptr};
  torch::nn::Dropout word_drop{nullptr};
  torch::nn::GRU enc{nullptr};
  torch::nn::Linear to_mu{nullptr}, to_logvar{nullptr}, to_h{nullptr}, out{nullptr};
  torch::nn::GRUCell dec{nullptr};
};
TORCH_MODULE(MolVAE);

torch::Tensor smiles_batch(int64_t n) {
  auto x = torch::randint(2, kVocab, {n, kMaxLen}, torch::kLong);
  x.select(1, 0).fill_(kBos);
  return x;
}

torch::Tensor kl_divergence(const torch::Tensor &mu, const torch::Tensor &logvar) {
  return -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1).mean();
}

namespace telemetry {
torch::Tensor kl_total;  // summed KL for the run report
void log_kl(const torch::Tensor &kl) {
  // BUG(torch-loss-accumulation-graph): the global sum keeps every step's
  // KL term with its encoder graph.
  kl_total += kl;
}
}  // namespace telemetry

// Collects a step's numbers and prints them when the step ends.
struct StepLine {
  explicit StepLine(int64_t s) : step(s), t0(std::chrono::steady_clock::now()) {}
  ~StepLine() {
    const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    // BUG(torch-host-sync-in-loop): a StepLine lives in every training step;
    // printing the device loss syncs each time it goes out of scope.
    std::cout << "step " << step << " loss " << loss << " (" << ms << " ms)\n";
  }
  int64_t step;
  std::chrono::steady_clock::time_point t0;
  torch::Tensor loss;
};

// Resets the gradients when the step's scope ends.
struct GradResetOnExit {
  explicit GradResetOnExit(torch::nn::Module &m) : module(m) {}
  ~GradResetOnExit() { module.zero_grad(); }
  torch::nn::Module &module;
};

class VaeTrainer {
 public:
  VaeTrainer(torch::Device device, int64_t steps)
      : device_(device), steps_(steps), opt_(vae_->parameters(), torch::optim::AdamOptions(1e-3)) {
    vae_->to(device_);
  }
  MolVAE model() const { return vae_; }
  const std::optional<MolVAE> &best() const { return best_; }

  void fit() {
    vae_->train();
    ema_ = torch::zeros({}, device_);
    double best_val = 1e9;
    for (int64_t step = 0; step < steps_; ++step) {
      GradResetOnExit reset(*vae_);
      StepLine line(step);
      auto x = smiles_batch(64).to(device_);
      auto [logits, mu, logvar] = vae_->forward(x);
      auto recon = F::cross_entropy(logits.reshape({-1, kVocab}), x.slice(1, 1).reshape({-1}));
      auto kl = kl_divergence(mu, logvar);
      const double beta = std::min(1.0, static_cast<double>(step) / 2000.0);
      auto loss = recon + beta * kl;
      loss.backward();
      torch::nn::utils::clip_grad_norm_(vae_->parameters(), 1.0);
      // OK(torch-missing-zero-grad): the scope object resets the gradients
      // when the iteration ends.
      opt_.step();
      telemetry::log_kl(kl);
      // BUG(torch-loss-accumulation-graph): the EMA member keeps a
      // reference to every step's loss graph.
      *ema_ = *ema_ + 0.02 * (loss - *ema_);
      line.loss = loss.detach();
      if (step % 500 == 499) {
        const double val = validate();
        if (val < best_val) {
          best_val = val;
          best_ = MolVAE(std::dynamic_pointer_cast<MolVAEImpl>(vae_->clone()));
        }
      }
    }
  }

  double validate() {
    torch::NoGradGuard no_grad;
    vae_->eval();
    auto x = smiles_batch(256).to(device_);
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval().
    auto logits = std::get<0>(vae_->forward(x));
    const double nll = F::cross_entropy(logits.reshape({-1, kVocab}), x.slice(1, 1).reshape({-1})).item<double>();
    vae_->train();
    return nll;
  }

 private:
  torch::Device device_;
  int64_t steps_;
  MolVAE vae_;
  torch::optim::Adam opt_;
  std::optional<torch::Tensor> ema_;
  std::optional<MolVAE> best_;
};

std::tuple<torch::Tensor, torch::Tensor> sample_with_logp(MolVAE &vae, const torch::Tensor &z) {
  auto h = vae->latent_to_hidden(z);
  auto tok = torch::full({z.size(0)}, kBos, torch::TensorOptions().dtype(torch::kLong).device(z.device()));
  std::vector<torch::Tensor> toks, logps;
  for (int64_t t = 0; t < kMaxLen; ++t) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): the
    // log-probabilities are returned and the caller backpropagates them.
    auto [logits, h2] = vae->decode_step(tok, h);
    h = h2;
    auto logp = F::log_softmax(logits, 1);
    tok = torch::multinomial(logp.exp(), 1).squeeze(1);
    toks.push_back(tok);
    // OK(torch-loss-accumulation-graph): returned to the caller's loss.
    logps.push_back(logp.gather(1, tok.unsqueeze(1)).squeeze(1));
  }
  return {torch::stack(toks, 1), torch::stack(logps, 1)};
}

// Host-side property proxy: rewards ring-closure and aromatic tokens.
torch::Tensor score_molecules(const torch::Tensor &tokens) {
  return ((tokens >= 30) & (tokens < 36)).to(torch::kFloat).mean(1);
}

struct TrainState {
  MolVAE vae;
  std::shared_ptr<torch::optim::Optimizer> opt;
  torch::Device device;
  double baseline = 0.0;
};

void apply_policy_gradient(TrainState &st, const torch::Tensor &loss) {
  loss.backward();
  torch::nn::utils::clip_grad_norm_(st.vae->parameters(), 1.0);
  // BUG(torch-missing-zero-grad): nothing resets the gradients between
  // fine-tuning iterations; each update carries all earlier ones.
  st.opt->step();
}

void finetune_toward_property(TrainState &st, int64_t iters, int64_t n) {
  st.vae->train();
  for (int64_t it = 0; it < iters; ++it) {
    auto z = torch::randn({n, kLatent}, torch::TensorOptions().device(st.device));
    auto [tokens, logp] = sample_with_logp(st.vae, z);
    // BUG(torch-host-sync-in-loop): the sampled tokens come back to the host
    // on every fine-tuning iteration.
    auto host_tokens = tokens.to(torch::kCPU);
    auto reward = score_molecules(host_tokens);
    auto adv = (reward - st.baseline).to(st.device);
    // OK(torch-host-sync-in-loop): the reward is a host tensor.
    st.baseline = 0.9 * st.baseline + 0.1 * reward.mean().item<double>();
    apply_policy_gradient(st, -(adv * logp.sum(1)).mean());
  }
}

torch::Tensor sample_prior(MolVAE vae, int64_t n, torch::Device device) {
  auto h = vae->latent_to_hidden(torch::randn({n, kLatent}, torch::TensorOptions().device(device)));
  auto tok = torch::full({n}, kBos, torch::TensorOptions().dtype(torch::kLong).device(device));
  std::vector<torch::Tensor> out;
  for (int64_t t = 0; t < kMaxLen; ++t) {
    // BUG(torch-eval-mode-missing): the fine-tune left the decoder in
    // training mode; word dropout is on while sampling.
    // BUG(torch-inference-without-no-grad): a sampling loop with no guard.
    auto [logits, h2] = vae->decode_step(tok, h);
    h = h2;
    tok = logits.argmax(1);
    out.push_back(tok);
  }
  return torch::stack(out, 1);
}

double reconstruction_accuracy(MolVAE vae, const torch::Tensor &x) {
  torch::NoGradGuard no_grad;
  // BUG(torch-eval-mode-missing): (probe: clone keeps the mode) the best
  // checkpoint was cloned from the module in training mode.
  auto logits = std::get<0>(vae->forward(x));
  return logits.argmax(2).eq(x.slice(1, 1)).to(torch::kFloat).mean().item<double>();
}

int main() {
  torch::manual_seed(271);
  torch::Device device(torch::kCPU);
  // OK(torch-cuda-unguarded): switched to CUDA only when it is available.
  if (torch::cuda::is_available()) device = torch::Device(torch::kCUDA);
  telemetry::kl_total = torch::zeros({}, device);
  VaeTrainer trainer(device, 10000);
  trainer.fit();
  if (trainer.best())
    std::cout << "best recon acc " << reconstruction_accuracy(*trainer.best(), smiles_batch(256).to(device)) << "\n";
  TrainState st{trainer.model(), nullptr, device};
  st.opt = std::make_shared<torch::optim::Adam>(st.vae->parameters(), torch::optim::AdamOptions(1e-5));
  finetune_toward_property(st, 300, 128);
  auto mols = sample_prior(st.vae, 1000, device);
  std::cout << "mean property " << score_molecules(mols.cpu()).mean().item<double>() << " kl total "
            << telemetry::kl_total.item<double>() << "\n";
}
