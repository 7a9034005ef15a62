// Instruction fine-tuning of a small decoder-only language model on a
// support-ticket corpus, then held-out perplexity, scoring of reference and
// canned replies. Token ids come
// from the tokenizer as std::vector<int64_t>; the trainer accumulates
// gradients over `accum_steps` micro-batches (from the run's FinetuneConfig)
// and counts them in a member. Mixed precision goes through a project RAII
// scope, with the dtype the config asks for.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define LM_AUTOCAST(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#define LM_AUTOCAST_IS_ON() at::autocast::is_autocast_enabled(at::kCUDA)
#define LM_AUTOCAST_DTYPE(t) at::autocast::set_autocast_dtype(at::kCUDA, (t))
#else
#define LM_AUTOCAST(on) at::autocast::set_enabled(on)
#define LM_AUTOCAST_IS_ON() at::autocast::is_enabled()
#define LM_AUTOCAST_DTYPE(t) at::autocast::set_autocast_gpu_dtype(t)
#endif

constexpr int64_t kVocab = 512, kModel = 128, kHeads = 4, kLayers = 2, kContext = 48;

struct FinetuneConfig {
  int64_t accum_steps = 8;
  int64_t epochs = 3;
  double lr = 2e-4;
  at::ScalarType amp_dtype = at::kBFloat16;
};

// CUDA autocast for one scope, in the dtype given; restores the previous state.
class AmpScope {
 public:
  explicit AmpScope(at::ScalarType dtype) : was_on_(LM_AUTOCAST_IS_ON()) {
    LM_AUTOCAST_DTYPE(dtype);
    LM_AUTOCAST(true);
  }
  ~AmpScope() { LM_AUTOCAST(was_on_); }

 private:
  bool was_on_;
};

struct TinyLMImpl : torch::nn::Module {
  TinyLMImpl()
      : embed(register_module("embed", torch::nn::Embedding(kVocab, kModel))),
        blocks(register_module(
            "blocks", torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(
                          torch::nn::TransformerEncoderLayerOptions(kModel, kHeads).dim_feedforward(4 * kModel),
                          kLayers)))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kModel})))),
        head(register_module("head", torch::nn::Linear(kModel, kVocab))) {
    pos = register_parameter("pos", 0.02 * torch::randn({kContext, kModel}));
  }

  // tokens [B, T] -> final hidden states [B, T, kModel], causal.
  torch::Tensor features(const torch::Tensor &tokens) {
    const int64_t t = tokens.size(1);
    auto causal = torch::triu(torch::full({t, t}, -std::numeric_limits<float>::infinity(), pos.options()), 1);
    auto h = blocks->forward((embed->forward(tokens) + pos.slice(0, 0, t)).transpose(0, 1), causal);
    return norm->forward(h.transpose(0, 1));
  }
  torch::Tensor forward(const torch::Tensor &tokens) { return head->forward(features(tokens)); }

  torch::nn::Embedding embed;
  torch::nn::TransformerEncoder blocks;
  torch::nn::LayerNorm norm;
  torch::nn::Linear head;
  torch::Tensor pos;
};
TORCH_MODULE(TinyLM);

struct TokenBatch {
  torch::Tensor tokens;  // [B, kContext + 1] int64
};

// Packs tokenised tickets into one batch of windows.
TokenBatch pack(const std::vector<std::vector<int64_t>> &tickets) {
  std::vector<int64_t> ids;
  for (const auto &t : tickets)
    ids.insert(ids.end(), t.begin(), t.begin() + kContext + 1);
  const auto rows = static_cast<int64_t>(tickets.size());
  return {torch::from_blob(ids.data(), {rows, kContext + 1}, torch::kLong).clone()};
}

torch::Tensor next_token_loss(const torch::Tensor &logits, const torch::Tensor &targets) {
  return F::cross_entropy(logits.reshape({-1, kVocab}), targets.reshape({-1}));
}

class Trainer {
 public:
  Trainer(TinyLM model, const FinetuneConfig &cfg, torch::Device device)
      : model_(std::move(model)), cfg_(cfg), device_(device),
        opt_(model_->parameters(), torch::optim::AdamWOptions(cfg.lr).weight_decay(0.01)) {}

  void fit(const std::vector<TokenBatch> &batches) {
    model_->train();
    opt_.zero_grad();
    for (int64_t epoch = 0; epoch < cfg_.epochs; ++epoch) {
      for (const auto &batch : batches)
        micro_step(batch);
      std::cout << "epoch " << epoch << ": " << updates_ << " updates\n";
    }
  }

 private:
  void micro_step(const TokenBatch &batch) {
    // BUG(torch-non-blocking-pageable): pack() cloned the ids out of a
    // std::vector into pageable memory; the copy runs synchronously.
    auto tokens = batch.tokens.to(device_, /*non_blocking=*/true);
    torch::Tensor loss;
    {
      AmpScope amp(cfg_.amp_dtype);
      loss = next_token_loss(model_->forward(tokens.slice(1, 0, kContext)), tokens.slice(1, 1, kContext + 1));
    }
    // OK(torch-autocast-region): the region ran in bfloat16 (main's config)
    // and was closed by the scope before backward().
    // BUG(torch-grad-accumulation-unscaled): the mean loss of every
    // micro-batch adds up for accum_steps micro-batches before one update.
    loss.backward();
    if (++micro_ == cfg_.accum_steps) {
      micro_ = 0;
      apply_update();
    }
  }

  void apply_update() {
    torch::nn::utils::clip_grad_norm_(model_->parameters(), 1.0);
    // OK(torch-missing-zero-grad): reset right after the update.
    opt_.step();
    opt_.zero_grad();
    ++updates_;
  }

  TinyLM model_;
  FinetuneConfig cfg_;
  torch::Device device_;
  torch::optim::AdamW opt_;
  int64_t micro_ = 0;
  int64_t updates_ = 0;
};

double perplexity(TinyLM &model, const std::vector<TokenBatch> &held_out, torch::Device device) {
  torch::NoGradGuard no_grad;
  model->eval();
  double total = 0.0;
  int64_t count = 0;
  // BUG(torch-autocast-region): the early return on a non-finite loss
  // leaves the thread in autocast.
  LM_AUTOCAST(true);
  for (const auto &batch : held_out) {
    auto tokens = batch.tokens.to(device);
    auto loss = next_token_loss(model->forward(tokens.slice(1, 0, kContext)), tokens.slice(1, 1, kContext + 1));
    const double nll = loss.item<double>();
    if (!std::isfinite(nll)) {
      std::cerr << "non-finite held-out loss\n";
      return std::numeric_limits<double>::infinity();
    }
    total += nll;
    ++count;
  }
  LM_AUTOCAST(false);
  return std::exp(total / static_cast<double>(std::max<int64_t>(count, 1)));
}

class Sampler {
 public:
  Sampler(TinyLM model, torch::Device device)
      : model_(std::move(model)), tokens_(torch::TensorOptions().dtype(torch::kLong).device(device)) {}

  // Mean next-token loss of a reference reply; the upload and the copy back
  // overlap the caller's work.
  torch::Tensor sequence_nll(const torch::Tensor &tokens) {
    auto on_device = tokens.to(tokens_, /*non_blocking=*/true);
    return next_token_loss(model_->forward(on_device.slice(1, 0, kContext)), on_device.slice(1, 1, kContext + 1))
        .to(torch::kCPU, /*non_blocking=*/true);
  }

 private:
  TinyLM model_;
  torch::TensorOptions tokens_;
};

void wait_for_device() {
  if (torch::cuda::is_available())
    torch::cuda::synchronize();
}

std::map<std::string, torch::Tensor> rank_replies(Sampler &sampler,
                                                  const std::map<std::string, TokenBatch> &replies) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> nll;
  for (const auto &[name, reply] : replies)
    // BUG(torch-non-blocking-pageable): the canned replies were packed into
    // pageable memory; sequence_nll() uploads them with non_blocking.
    nll[name] = sampler.sequence_nll(reply.tokens);
  return nll;
}

std::vector<std::vector<int64_t>> synthetic_tickets(std::mt19937 &rng, int64_t n) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(n));
  for (auto &t : out) {
    int64_t tok = static_cast<int64_t>(rng() % kVocab);
    for (int64_t j = 0; j <= kContext; ++j) {
      t.push_back(tok);
      tok = (tok * 31 + static_cast<int64_t>(rng() % 7)) % kVocab;
    }
  }
  return out;
}

int main() {
  torch::manual_seed(244);
  std::mt19937 rng(244);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  FinetuneConfig cfg;

  std::vector<TokenBatch> train, held_out;
  for (int i = 0; i < 64; ++i)
    train.push_back(pack(synthetic_tickets(rng, 4)));
  for (int i = 0; i < 8; ++i)
    held_out.push_back(pack(synthetic_tickets(rng, 4)));

  TinyLM model;
  model->to(device);
  Trainer trainer(model, cfg, device);
  trainer.fit(train);
  std::cout << "held-out perplexity " << perplexity(model, held_out, device) << '\n';

  model->eval();
  Sampler sampler(model, device);
  auto reference = held_out.front().tokens.pin_memory();
  // OK(torch-non-blocking-pageable): the reference was pinned first.
  auto nll = sampler.sequence_nll(reference);
  wait_for_device();
  // OK(torch-non-blocking-d2h-race): wait_for_device() synchronised first.
  std::cout << "reference answer nll " << nll.item<double>() << '\n';

  std::map<std::string, TokenBatch> replies;
  for (const char *name : {"refund", "reset_password", "escalate"})
    replies[name] = pack(synthetic_tickets(rng, 1));
  for (const auto &[name, nll_host] : rank_replies(sampler, replies))
    // BUG(torch-non-blocking-d2h-race): each map entry holds a copy that
    // sequence_nll() only started; nothing synchronised since.
    std::cout << "reply " << name << ": nll " << nll_host.item<double>() << '\n';
}
