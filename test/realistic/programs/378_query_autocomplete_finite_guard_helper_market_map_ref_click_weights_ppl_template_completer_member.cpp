// Query autocomplete: a character-level GRU language model over search-log
// queries, trained with click weights and per-market loss tracking, scored by
// perplexity on a held-out day (and on a second GPU for a challenger copy), and
// served by a beam-search completer that mixes in a count-based bigram prior.
// LibTorch 1.13/2.x.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace qac {

constexpr int64_t kVocab = 40, kMaxLen = 24, kBatch = 64;
using Step = std::tuple<torch::Tensor, torch::Tensor>;  // logits, hidden

class CharVocab {
 public:
  static int64_t id(char c) {
    if (c >= 'a' && c <= 'z') return 2 + (c - 'a');
    if (c >= '0' && c <= '9') return 28 + (c - '0');
    return c == ' ' ? 38 : 39;
  }
  static char chr(int64_t id) { return id >= 2 && id < 28 ? static_cast<char>('a' + id - 2) : id >= 28 && id < 38 ? static_cast<char>('0' + id - 28) : ' '; }
  static torch::Tensor encode(const std::string &q) {
    std::vector<int64_t> ids{1};
    for (char c : q) ids.push_back(id(c));
    return torch::tensor(ids, torch::kLong);
  }
};

struct CharLMImpl : nn::Module {
  CharLMImpl()
      : emb(register_module("emb", nn::Embedding(kVocab, 64))),
        gru(register_module("gru", nn::GRU(nn::GRUOptions(64, 256).batch_first(true)))),
        drop(register_module("drop", nn::Dropout(0.2))), out(register_module("out", nn::Linear(256, kVocab))) {}
  Step forward(const torch::Tensor &ids, const torch::Tensor &h = {}) {
    auto r = gru->forward(emb->forward(ids), h);
    return {out->forward(drop->forward(std::get<0>(r))), std::get<1>(r)};
  }
  Step step(const torch::Tensor &ids, const torch::Tensor &h) {
    auto r = forward(ids, h);
    return {std::get<0>(r).select(1, -1), std::get<1>(r)};
  }
  nn::Embedding emb;
  nn::GRU gru;
  nn::Dropout drop;
  nn::Linear out;
};
TORCH_MODULE(CharLM);

// Log bigram probabilities from the query log, as a lookup table.
struct PrefixPriorImpl : nn::Module {
  explicit PrefixPriorImpl(const torch::Tensor &log_bigram) : table(register_module("table", nn::Embedding::from_pretrained(log_bigram))) {}
  torch::Tensor forward(const torch::Tensor &last) { return table->forward(last); }
  nn::Embedding table;
};
TORCH_MODULE(PrefixPrior);

struct QueryBatch {
  std::string market;
  torch::Tensor input, target;  // B x kMaxLen, 0-padded
  torch::Tensor clicks;         // B, log-click weight of each query
};

std::vector<QueryBatch> make_batches(int64_t n, const std::vector<std::string> &markets) {
  std::vector<QueryBatch> out;
  for (int64_t i = 0; i < n; ++i) {
    auto seq = torch::randint(2, kVocab, {kBatch, kMaxLen + 1}, torch::kLong);
    out.push_back({markets[static_cast<size_t>(i) % markets.size()], seq.narrow(1, 0, kMaxLen), seq.narrow(1, 1, kMaxLen),
                   torch::log1p(torch::randint(1, 500, {kBatch}, torch::kFloat))});
  }
  return out;
}

struct Guards {
  static void assert_finite(const torch::Tensor &loss, int64_t step) {
    // BUG(torch-host-sync-in-loop): called before every backward; the bool is read back each step.
    if (!torch::isfinite(loss).all().item<bool>()) throw std::runtime_error("non-finite loss at step " + std::to_string(step));
  }
};

class LmTrainer {
 public:
  LmTrainer(CharLM lm, torch::Device device, int64_t log_every)
      : lm_(std::move(lm)), device_(device), log_every_(log_every), opt_(lm_->parameters(), torch::optim::AdamOptions(2e-3)) {}

  void train_epoch(const std::vector<QueryBatch> &batches) {
    for (const auto &b : batches) {
      auto x = b.input.to(device_), y = b.target.to(device_);
      // OK(torch-missing-zero-grad): the module's gradients are reset before every backward.
      lm_->zero_grad();
      auto logits = std::get<0>(lm_->forward(x));
      auto tok = F::cross_entropy(logits.reshape({-1, kVocab}), y.reshape({-1}), F::CrossEntropyFuncOptions().ignore_index(0).reduction(torch::kNone));
      // BUG(torch-device-mismatch): the click weights are the only field of the batch not moved to device_.
      auto loss = (tok.view({kBatch, kMaxLen}) * b.clicks.unsqueeze(1)).sum() / (y != 0).sum();
      Guards::assert_finite(loss, step_);
      loss.backward();
      nn::utils::clip_grad_norm_(lm_->parameters(), 1.0);
      opt_.step();
      auto &slot = per_market_[b.market];
      if (!slot.defined()) slot = torch::zeros({}, loss.options());
      // BUG(torch-loss-accumulation-graph): the map slot keeps every step's graph for that market.
      slot += loss;
      // OK(torch-host-sync-in-loop): printed every log_every_ steps.
      if (++step_ % log_every_ == 0) std::cout << "step " << step_ << " loss " << loss.item<double>() << '\n';
    }
    for (const auto &kv : per_market_) std::cout << kv.first << " loss sum " << kv.second.item<double>() << '\n';
    per_market_.clear();
  }

 private:
  CharLM lm_;
  torch::Device device_;
  int64_t log_every_, step_ = 0;
  torch::optim::Adam opt_;
  std::map<std::string, torch::Tensor> per_market_;
};

template <typename LM>
double perplexity(LM &lm, const std::vector<QueryBatch> &held, torch::Device device) {
  lm->eval();
  double nll = 0.0, tokens = 0.0;
  for (const auto &b : held) {
    auto y = b.target.to(device);
    // BUG(torch-inference-without-no-grad): no guard; each batch records a graph nobody backpropagates.
    torch::Tensor logits = std::get<0>(lm->forward(b.input.to(device)));
    torch::Tensor loss = F::cross_entropy(logits.reshape({-1, kVocab}), y.reshape({-1}), F::CrossEntropyFuncOptions().ignore_index(0).reduction(torch::kSum));
    // OK(torch-loss-accumulation-graph): item() adds a double.
    nll += loss.item<double>();
    tokens += static_cast<double>((y != 0).sum().item<int64_t>());
  }
  lm->train();
  return std::exp(nll / tokens);
}

class Completer {
 public:
  Completer(CharLM lm, PrefixPrior prior, torch::Device device) : lm_(std::move(lm)), prior_(std::move(prior)), device_(device) {
    // OK(torch-tensor-to-discarded): Module::to moves the parameters in place.
    lm_->to(device_);
    prior_->to(device_);
  }

  std::vector<std::string> complete(const std::string &prefix, int64_t beam, int64_t max_new) {
    torch::InferenceMode guard;
    auto cur = CharVocab::encode(prefix).to(device_).unsqueeze(0).repeat({beam, 1});
    // OK(torch-device-mismatch): new_zeros keeps cur's device.
    auto scores = cur.new_zeros({beam}, torch::TensorOptions().dtype(torch::kFloat));
    std::vector<std::string> texts(static_cast<size_t>(beam), prefix);
    torch::Tensor h;
    for (int64_t t = 0; t < max_new; ++t) {
      // BUG(torch-eval-mode-missing): perplexity() handed the model back in training mode; dropout is on.
      // OK(torch-inference-without-no-grad): the InferenceMode guard covers the loop.
      auto out = lm_->step(cur, h);
      // OK(torch-eval-mode-missing): the prior is a lookup table without dropout or batch norm.
      auto logp = torch::log_softmax(std::get<0>(out), -1) + 0.3 * prior_->forward(cur.select(1, -1));
      auto total = (scores.unsqueeze(1) + logp).flatten();
      auto top = (t == 0 ? total.narrow(0, 0, kVocab) : total).topk(beam);
      auto from = std::get<1>(top).div(kVocab, "floor"), tok = std::get<1>(top).remainder(kVocab);
      h = std::get<1>(out).index_select(1, from);
      scores = std::get<0>(top);
      cur = tok.unsqueeze(1);
      auto f = from.cpu(), k = tok.cpu();
      std::vector<std::string> next;
      for (int64_t i = 0; i < beam; ++i) next.push_back(texts[static_cast<size_t>(f[i].item<int64_t>())] + CharVocab::chr(k[i].item<int64_t>()));
      texts = std::move(next);
    }
    return texts;
  }

 private:
  CharLM lm_;
  PrefixPrior prior_;
  torch::Device device_;
};

// Drops cached blocks between training and serving so the serving process
// starts from a small footprint.
void release_training_memory(const torch::Device &d) {
  // OK(torch-empty-cache-in-loop): the helper's only caller is outside any loop.
  if (d.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
}

}  // namespace qac

int main() {
  using namespace qac;
  torch::manual_seed(378);
  const bool gpu = torch::cuda::is_available();
  torch::Device device = gpu ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);

  CharLM lm;
  lm->to(device);
  auto train = make_batches(120, {"us", "de", "jp"}), held = make_batches(10, {"us"});
  LmTrainer trainer(lm, device, 40);
  for (int epoch = 0; epoch < 3; ++epoch) {
    trainer.train_epoch(train);
    std::cout << "epoch " << epoch << " ppl " << perplexity(lm, held, device) << '\n';
  }
  if (gpu && torch::cuda::device_count() > 1) {
    // OK(torch-device-index-unchecked, torch-cuda-unguarded): the count and availability are checked above.
    torch::Device replica(torch::kCUDA, 1);
    torch::save(lm, "qac_lm.pt");
    CharLM challenger;
    torch::load(challenger, "qac_lm.pt");
    challenger->to(replica);
    std::cout << "challenger ppl on cuda:1 " << perplexity(challenger, held, replica) << '\n';
  }
  release_training_memory(device);

  auto counts = torch::ones({kVocab, kVocab}) + torch::randint(0, 50, {kVocab, kVocab}, torch::kFloat);
  PrefixPrior prior(torch::log(counts / counts.sum(1, true)));
  Completer completer(lm, prior, device);
  for (const std::string p : {"weather ", "cheap fl", "how to "})
    for (const auto &c : completer.complete(p, 4, 8)) std::cout << p << " -> " << c << '\n';
  return 0;
}
