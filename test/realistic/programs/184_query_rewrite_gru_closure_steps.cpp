// Query rewriting for a shop's search box: a character-level GRU
// encoder-decoder turns misspelt queries ("wirelss hedphones") into the
// catalogue's spelling. Trained with teacher forcing on click logs; the
// update cadence is a stateful lambda (its counter lives in the closure) and
// gradients are cleared through a small lambda too. A locale adapter
// fine-tunes on a few hundred Portuguese queries, and the metrics are
// function templates shared with a lookup-table baseline.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kChars = 64, kLen = 24, kBos = 1, kEos = 2, kPad = 0;

struct RewriterImpl : nn::Module {
  explicit RewriterImpl(int64_t hidden)
      : embed(register_module("embed", nn::Embedding(nn::EmbeddingOptions(kChars, 64).padding_idx(kPad)))),
        encoder(register_module("encoder", nn::GRU(nn::GRUOptions(64, hidden).batch_first(true)))),
        decoder(register_module("decoder", nn::GRU(nn::GRUOptions(64, hidden).batch_first(true)))),
        drop(register_module("drop", nn::Dropout(0.25))),
        out(register_module("out", nn::Linear(hidden, kChars))) {}

  // Teacher-forced logits [B, T, kChars] for the target prefix `dec_in`.
  torch::Tensor forward(const torch::Tensor& src, const torch::Tensor& dec_in) {
    auto h = std::get<1>(encoder->forward(drop(embed(src))));
    auto y = std::get<0>(decoder->forward(drop(embed(dec_in)), h));
    return out(drop(y));
  }

  // Greedy decoding, one character at a time.
  torch::Tensor rewrite(const torch::Tensor& src) {
    auto h = std::get<1>(encoder->forward(drop(embed(src))));
    auto tok = torch::full({src.size(0), 1}, kBos, src.options());
    std::vector<torch::Tensor> chars;
    for (int64_t t = 0; t < kLen; ++t) {
      auto step = decoder->forward(drop(embed(tok)), h);
      h = std::get<1>(step);
      tok = out(drop(std::get<0>(step))).argmax(-1);
      chars.push_back(tok);
    }
    return torch::cat(chars, 1);
  }

  nn::Embedding embed;
  nn::GRU encoder, decoder;
  nn::Dropout drop;
  nn::Linear out;
};
TORCH_MODULE(Rewriter);

struct QueryPairs {
  torch::Tensor noisy, clean;  // [B, kLen] character ids, kEos then kPad
};

std::vector<QueryPairs> click_log_pairs(int64_t batches, int64_t n, torch::Device device) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  std::vector<QueryPairs> out;
  for (int64_t b = 0; b < batches; ++b) {
    auto clean = torch::randint(3, kChars, {n, kLen}, opts);
    auto typo = torch::rand({n, kLen}, device) < 0.1;
    auto noisy = torch::where(typo, torch::randint(3, kChars, {n, kLen}, opts), clean);
    out.push_back({noisy, clean});
  }
  return out;
}

torch::Tensor shift_right(const torch::Tensor& target) {
  auto bos = torch::full({target.size(0), 1}, kBos, target.options());
  return torch::cat({bos, target.narrow(1, 0, kLen - 1)}, 1);
}

torch::Tensor seq_loss(Rewriter& model, const QueryPairs& q) {
  auto logits = model->forward(q.noisy, shift_right(q.clean));
  return F::cross_entropy(logits.reshape({-1, kChars}), q.clean.reshape({-1}),
                          F::CrossEntropyFuncOptions().ignore_index(kPad));
}

// Whole-query exact match; works for any model with rewrite(src).
template <typename Model>
double exact_match(Model& model, const std::vector<QueryPairs>& data) {
  torch::NoGradGuard no_grad;
  int64_t exact = 0, total = 0;
  for (const auto& q : data) {
    // OK(torch-eval-mode-missing): both callers switch the model to eval() first.
    torch::Tensor pred = model->rewrite(q.noisy);
    exact += pred.eq(q.clean).all(1).sum().item<int64_t>();
    total += q.noisy.size(0);
  }
  return static_cast<double>(exact) / static_cast<double>(total);
}

// Rewrites a live batch for the A/B shadow log.
template <typename Model>
torch::Tensor shadow_rewrite(Model& model, const torch::Tensor& queries) {
  c10::InferenceMode guard;
  // BUG(torch-eval-mode-missing): main() calls this right after
  // adapt_to_locale(), which trains and never calls eval(): dropout is on.
  return model->rewrite(queries);
}

void train_rewriter(Rewriter& model, const std::vector<QueryPairs>& data, int64_t accum, int epochs) {
  model->train();
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(2e-3));
  auto clear = [&opt] { opt.zero_grad(); };
  auto update_due = [micro = int64_t{0}, accum]() mutable { return ++micro % accum == 0; };
  clear();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (const auto& q : data) {
      auto loss = seq_loss(model, q);
      // OK(torch-grad-accumulation-unscaled): averaged over the accumulated batches.
      (loss / static_cast<double>(accum)).backward();
      if (update_due()) {
        nn::utils::clip_grad_norm_(model->parameters(), 5.0);
        // OK(torch-missing-zero-grad): cleared by the lambda under the same condition.
        opt.step();
        clear();
      }
    }
  }
}

void adapt_to_locale(Rewriter& model, const std::vector<QueryPairs>& locale, int epochs) {
  model->train();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.02));
  auto clear = [&opt] { opt.zero_grad(); };
  for (int epoch = 0; epoch < epochs; ++epoch) {
    clear();
    for (const auto& q : locale) {
      auto loss = seq_loss(model, q);
      loss.backward();
      // BUG(torch-missing-zero-grad): clear() runs once per epoch, so every
      // step applies the sum of the epoch's gradients so far.
      opt.step();
    }
  }
}

// Train-time lookup of the most frequent rewrite; nothing depends on the mode.
struct LookupBaselineImpl : nn::Module {
  LookupBaselineImpl() : table(register_module("table", nn::Embedding(kChars, kChars))) {}
  torch::Tensor rewrite(const torch::Tensor& src) { return table(src).argmax(-1); }
  nn::Embedding table;
};
TORCH_MODULE(LookupBaseline);

int main() {
  torch::manual_seed(184);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  auto logs = click_log_pairs(400, 32, device), held_out = click_log_pairs(20, 64, device);

  Rewriter model(256);
  model->to(device);
  train_rewriter(model, logs, /*accum=*/4, 6);
  model->eval();
  std::cout << "exact match " << exact_match(model, held_out) << '\n';

  LookupBaseline baseline;
  baseline->to(device);
  std::cout << "lookup baseline " << exact_match(baseline, held_out) << '\n';

  adapt_to_locale(model, click_log_pairs(20, 16, device), 3);
  auto shadow = shadow_rewrite(model, held_out.front().noisy);
  std::cout << "shadow batch " << shadow.sizes() << '\n';

  model->eval();
  std::cout << "pt-BR exact match " << exact_match(model, click_log_pairs(5, 64, device)) << '\n';
}
