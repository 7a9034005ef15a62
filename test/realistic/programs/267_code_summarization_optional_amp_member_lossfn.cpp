// Docstring generation for a code-search tool: an encoder-decoder transformer
// reads a function's BPE tokens and writes a one-line summary. A denoising
// pass over unlabelled code (sum-reduced token losses, gradients normalised by
// the token count) precedes fine-tuning on (function, docstring) pairs with a
// pluggable loss and bfloat16 autocast held per epoch. The service decodes
// greedily and reranks candidate summaries.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <array>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>
namespace nn = torch::nn;
namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define CS_AUTOCAST(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#define CS_AUTOCAST_IS_ON() at::autocast::is_autocast_enabled(at::kCUDA)
#define CS_AUTOCAST_DTYPE(t) at::autocast::set_autocast_dtype(at::kCUDA, (t))
#else
#define CS_AUTOCAST(on) at::autocast::set_enabled(on)
#define CS_AUTOCAST_IS_ON() at::autocast::is_enabled()
#define CS_AUTOCAST_DTYPE(t) at::autocast::set_autocast_gpu_dtype(t)
#endif
constexpr int64_t kVocab = 2000, kPad = 0, kBos = 1, kEos = 2, kMask = 3, kModel = 128, kMaxLen = 256;

// Autocast in `dtype` for one scope; restores whether it was on.
class AmpGuard {
 public:
  explicit AmpGuard(at::ScalarType dtype) : was_on_(CS_AUTOCAST_IS_ON()) {
    CS_AUTOCAST_DTYPE(dtype);
    CS_AUTOCAST(true);
  }
  ~AmpGuard() { CS_AUTOCAST(was_on_); }
 private:
  bool was_on_;
};
struct CodeSumConfig { int64_t accum_steps = 4, epochs = 3; double lr = 5e-4; };

struct Seq2SeqImpl : nn::Module {
  Seq2SeqImpl()
      : embed(register_module("embed", nn::Embedding(kVocab, kModel))),
        emb_drop(register_module("emb_drop", nn::Dropout(0.1))),
        core(register_module("core", nn::Transformer(nn::TransformerOptions(kModel, 4, 2, 2).dim_feedforward(256)))),
        out(register_module("out", nn::Linear(kModel, kVocab))) {
    pos = register_parameter("pos", 0.02 * torch::randn({kMaxLen, kModel}));
  }
  torch::Tensor embed_seq(const torch::Tensor& ids) {
    return emb_drop->forward(embed->forward(ids) + pos.slice(0, 0, ids.size(1))).transpose(0, 1);
  }
  // code [B, S], summary prefix [B, T] -> next-token logits [B, T, V]
  torch::Tensor forward(const torch::Tensor& code, const torch::Tensor& prefix) {
    auto causal = nn::TransformerImpl::generate_square_subsequent_mask(prefix.size(1)).to(code.device());
    return out->forward(core->forward(embed_seq(code), embed_seq(prefix), {}, causal).transpose(0, 1));
  }
  nn::Embedding embed;
  nn::Dropout emb_drop;
  nn::Transformer core;
  nn::Linear out;
  torch::Tensor pos;
};
TORCH_MODULE(Seq2Seq);
struct CodeBatch {
  torch::Tensor code, summary;  // [B, S], [B, T] int64
  int64_t target_tokens;        // counted by the loader, on the host
};

std::vector<CodeBatch> make_batches(int64_t n, int64_t b, int64_t s, int64_t t, torch::Device device) {
  std::vector<CodeBatch> out;
  auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
  for (int64_t i = 0; i < n; ++i)
    out.push_back({torch::randint(4, kVocab, {b, s}, ids), torch::randint(4, kVocab, {b, t}, ids), b * (t - 1)});
  return out;
}

torch::Tensor span_mask(const torch::Tensor& code) {
  auto pick = torch::rand(code.sizes(), code.options().dtype(torch::kFloat)) < 0.15;
  return torch::where(pick, torch::full_like(code, kMask), code);
}
using LossFn = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;
LossFn label_smoothed_ce(double eps) {
  return [eps](const torch::Tensor& logits, const torch::Tensor& targets) {
    return F::cross_entropy(logits.reshape({-1, kVocab}), targets.reshape({-1}),
                            F::CrossEntropyFuncOptions().ignore_index(kPad).label_smoothing(eps));
  };
}

// Mean next-token accuracy on held-out pairs.
double token_accuracy(Seq2Seq& model, const std::vector<CodeBatch>& val) {
  torch::NoGradGuard no_grad;
  model->eval();
  double acc = 0.0;
  for (const auto& b : val) {
    auto pred = model->forward(b.code, b.summary.slice(1, 0, -1)).argmax(-1);
    acc += (pred == b.summary.slice(1, 1)).to(torch::kFloat).mean().item<double>();
  }
  return acc / static_cast<double>(val.size());
}

class DenoisingPretrainer {
 public:
  DenoisingPretrainer(Seq2Seq model, const CodeSumConfig& cfg)
      : model_(std::move(model)), cfg_(cfg), opt_(model_->parameters(), torch::optim::AdamWOptions(cfg.lr)) {}
  void run(const std::vector<CodeBatch>& corpus) {
    opt_.zero_grad();
    int64_t tokens = 0, micro = 0;
    for (const auto& b : corpus) {
      torch::Tensor loss;
      {
        AmpGuard amp(at::kBFloat16);
        // BUG(torch-eval-mode-missing): main's baseline token_accuracy()
        // left the model in eval mode and nothing here calls train():
        // dropout is off for the whole denoising pass.
        auto logits = model_->forward(span_mask(b.code), b.code.slice(1, 0, -1));
        loss = F::cross_entropy(logits.reshape({-1, kVocab}), b.code.slice(1, 1).reshape({-1}),
                                F::CrossEntropyFuncOptions().ignore_index(kPad).reduction(torch::kSum));
      }
      // OK(torch-grad-accumulation-unscaled): a sum over tokens; the
      // gradients are divided by the token count before each step.
      loss.backward();
      tokens += b.target_tokens;
      if (++micro % cfg_.accum_steps == 0) {
        for (auto& p : model_->parameters())
          if (p.grad().defined())
            p.grad().div_(static_cast<double>(tokens));
        opt_.step();
        opt_.zero_grad();
        tokens = 0;
      }
    }
  }
 private:
  Seq2Seq model_;
  CodeSumConfig cfg_;
  torch::optim::AdamW opt_;
};

class SummaryTrainer {
 public:
  SummaryTrainer(Seq2Seq model, const CodeSumConfig& cfg, LossFn loss_fn, torch::Device device)
      : model_(std::move(model)), cfg_(cfg), loss_fn_(std::move(loss_fn)),
        opt_(model_->parameters(), torch::optim::AdamWOptions(cfg.lr * 0.5)) {
    for (auto& t : bucket_loss_)
      t = torch::zeros({}, device);
  }
  void fit(const std::vector<CodeBatch>& data) {
    model_->train();
    for (int64_t epoch = 0; epoch < cfg_.epochs; ++epoch) {
      begin_epoch();
      for (const auto& b : data)
        micro_step(b);
      end_epoch(epoch);
    }
  }

 private:
  static size_t bucket_of(const CodeBatch& b) { return b.code.size(1) <= 64 ? 0 : b.code.size(1) <= 128 ? 1 : 2; }
  void begin_epoch() { amp_.emplace(at::kBFloat16); }
  void end_epoch(int64_t epoch) {
    amp_.reset();
    std::cout << "epoch " << epoch << " short-function loss " << bucket_loss_[0].item<double>() << '\n';
  }
  void micro_step(const CodeBatch& b) {
    auto loss = loss_fn_(model_->forward(b.code, b.summary.slice(1, 0, -1)), b.summary.slice(1, 1));
    // BUG(torch-loss-accumulation-graph): the bucket totals live in the
    // trainer and keep every micro-batch's graph.
    bucket_loss_[bucket_of(b)] += loss;
    // BUG(torch-autocast-region): amp_ is held from begin_epoch() to
    // end_epoch(), so backward() runs inside the autocast region.
    // BUG(torch-grad-accumulation-unscaled): the label-smoothed mean loss of
    // accum_steps micro-batches adds up before each step, never divided.
    loss.backward();
    if (++micro_ == cfg_.accum_steps) {
      micro_ = 0;
      opt_.step();
      opt_.zero_grad();
    }
  }

  Seq2Seq model_;
  CodeSumConfig cfg_;
  LossFn loss_fn_;
  torch::optim::AdamW opt_;
  std::optional<AmpGuard> amp_;
  std::array<torch::Tensor, 3> bucket_loss_;
  int64_t micro_ = 0;
};

std::vector<int64_t> summarize(Seq2Seq& model, const torch::Tensor& code, int64_t max_len) {
  torch::NoGradGuard no_grad;
  model->eval();
  std::vector<int64_t> out = {kBos};
  // BUG(torch-autocast-region): the handler rethrows as a runtime_error with
  // autocast still on; the request thread stays in reduced precision.
  CS_AUTOCAST(true);
  for (int64_t step = 0; step < max_len && out.back() != kEos; ++step) {
    auto prefix = torch::tensor(out, torch::kLong).unsqueeze(0).to(code.device());
    torch::Tensor logits;
    try {
      logits = model->forward(code, prefix);
    } catch (const c10::Error& e) {
      throw std::runtime_error("decoder failed at step " + std::to_string(step) + ": " + e.what_without_backtrace());
    }
    out.push_back(logits.select(1, -1).argmax(-1).item<int64_t>());
  }
  CS_AUTOCAST(false);
  return out;
}

// Index of the candidate docstring the model finds most likely, -1 if none.
int64_t rank_candidates(Seq2Seq& model, const torch::Tensor& code, const std::vector<torch::Tensor>& candidates) {
  torch::NoGradGuard no_grad;
  // OK(torch-autocast-region): the guard restores autocast on the early return.
  AmpGuard amp(at::kHalf);
  if (candidates.empty())
    return -1;
  int64_t best = 0;
  double best_lp = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < candidates.size(); ++i) {
    const auto& c = candidates[i];
    auto logp = torch::log_softmax(model->forward(code, c.slice(1, 0, -1)).to(torch::kFloat), -1);
    const double lp = logp.gather(-1, c.slice(1, 1).unsqueeze(-1)).sum().item<double>();
    if (lp > best_lp) {
      best_lp = lp;
      best = static_cast<int64_t>(i);
    }
  }
  return best;
}

int main() {
  torch::manual_seed(267);
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  CodeSumConfig cfg;
  auto corpus = make_batches(60, 16, 96, 96, device), pairs = make_batches(40, 16, 96, 24, device);
  auto val = make_batches(4, 16, 96, 24, device);
  Seq2Seq model;
  model->to(device);
  std::cout << "baseline token accuracy " << token_accuracy(model, val) << '\n';
  DenoisingPretrainer pretrainer(model, cfg);
  pretrainer.run(corpus);
  SummaryTrainer trainer(model, cfg, label_smoothed_ce(0.1), device);
  trainer.fit(pairs);
  std::cout << "fine-tuned token accuracy " << token_accuracy(model, val) << '\n';
  const auto code = val.front().code.slice(0, 0, 1);
  try {
    std::cout << "summary length " << summarize(model, code, 24).size() << '\n';
  } catch (const std::runtime_error& e) {
    std::cerr << e.what() << '\n';
  }
  std::vector<torch::Tensor> candidates = {val.front().summary.slice(0, 0, 1), val.back().summary.slice(0, 0, 1)};
  std::cout << "best candidate " << rank_candidates(model, code, candidates) << '\n';
}
