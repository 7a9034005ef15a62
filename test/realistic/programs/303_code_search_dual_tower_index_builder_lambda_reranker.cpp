// Natural-language code search: a query tower and a code tower (token
// embeddings, dropout, mean pooling) trained with InfoNCE on docstring /
// function pairs, with one hard negative per query mined from the pretrained
// code tower. A fluent builder encodes the corpus into an index that lives in
// host RAM; the retriever serves top-k, and a pair scorer held in the
// reranker's std::function member reorders the shortlist.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace codesearch {

constexpr int64_t kVocab = 8000, kDim = 128, kCodeLen = 64, kQueryLen = 16, kBatch = 64;
constexpr double kTau = 0.05;

const auto kUnit = F::NormalizeFuncOptions().dim(1);

struct TowerImpl : nn::Module {
  explicit TowerImpl(double p_drop)
      : emb(register_module("emb", nn::Embedding(kVocab, kDim))),
        drop(register_module("drop", nn::Dropout(p_drop))),
        proj(register_module("proj", nn::Linear(kDim, kDim))),
        norm(register_module("norm", nn::LayerNorm(nn::LayerNormOptions({kDim})))) {}
  torch::Tensor forward(const torch::Tensor &ids) {
    auto mask = ids.ne(0).unsqueeze(2).to(torch::kFloat);
    auto pooled = (drop->forward(emb->forward(ids)) * mask).sum(1) / mask.sum(1).clamp_min(1.0);
    return norm->forward(proj->forward(pooled));
  }
  nn::Embedding emb;
  nn::Dropout drop;
  nn::Linear proj;
  nn::LayerNorm norm;
};
TORCH_MODULE(Tower);

struct PairScorerImpl : nn::Module {
  PairScorerImpl()
      : fc(register_module("fc", nn::Linear(2 * kDim, 64))),
        drop(register_module("drop", nn::Dropout(0.2))),
        out(register_module("out", nn::Linear(64, 1))) {}
  torch::Tensor forward(const torch::Tensor &pair) { return out->forward(drop->forward(torch::relu(fc->forward(pair)))); }
  nn::Linear fc;
  nn::Dropout drop;
  nn::Linear out;
};
TORCH_MODULE(PairScorer);

// Switches a module to eval() for a scope and back to train() after it.
class EvalScope {
 public:
  explicit EvalScope(nn::Module &m) : m_(m) { m_.eval(); }
  ~EvalScope() { m_.train(); }
  EvalScope(const EvalScope &) = delete;
  EvalScope &operator=(const EvalScope &) = delete;

 private:
  nn::Module &m_;
};

// Stops a run whose loss went non-finite (fp16 overflow, a bad shard).
class DivergenceGuard {
 public:
  bool ok(const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): ok() runs on every training step; the
    // read of the loss stalls the device pipeline each time.
    const double v = loss.item<double>();
    bad_ = std::isfinite(v) ? 0 : bad_ + 1;
    return bad_ < 3;
  }

 private:
  int bad_ = 0;
};

// For each query, the snippet closest to its positive that is not the positive.
torch::Tensor mine_hard_negatives(Tower &code_tower, const torch::Tensor &corpus, const torch::Tensor &positives) {
  code_tower->eval();
  torch::NoGradGuard no_grad;
  auto c = F::normalize(code_tower->forward(corpus), kUnit);
  auto sims = c.index_select(0, positives).matmul(c.t());
  sims.scatter_(1, positives.unsqueeze(1), -2.0);
  return sims.argmax(1);
}

struct CodeIndex {
  torch::Tensor embeddings;  // [N, D], unit norm
};

class IndexBuilder {
 public:
  explicit IndexBuilder(Tower tower) : tower_(std::move(tower)) {}
  IndexBuilder &batch_size(int64_t n) {
    batch_ = n;
    return *this;
  }
  CodeIndex build(const torch::Tensor &corpus) {
    EvalScope scope(*tower_);
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> parts;
    for (int64_t i = 0; i < corpus.size(0); i += batch_)
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): EvalScope and the guard.
      parts.push_back(F::normalize(tower_->forward(corpus.slice(0, i, i + batch_)), kUnit));
    // The index lives in host RAM; device memory is kept for the towers.
    return {torch::cat(parts).to(torch::kCPU)};
  }

 private:
  Tower tower_;
  int64_t batch_ = 256;
};

// Re-encodes a sample of snippets and checks they land on their index rows.
double index_consistency(Tower &code_tower, const torch::Tensor &sample, const CodeIndex &index) {
  EvalScope scope(*code_tower);
  double cos = 0.0;
  for (int64_t i = 0; i < sample.size(0); i += kBatch) {
    // OK(torch-eval-mode-missing): EvalScope switched the tower to eval().
    // BUG(torch-inference-without-no-grad): EvalScope only changes the
    // mode; autograd still records every re-encoding.
    auto e = F::normalize(code_tower->forward(sample.slice(0, i, i + kBatch)), kUnit);
    auto rows = index.embeddings.slice(0, i, i + kBatch).to(e.device());
    cos += (e * rows).sum(1).mean().item<double>();
  }
  return cos / std::ceil(static_cast<double>(sample.size(0)) / kBatch);
}

class Retriever {
 public:
  Retriever(Tower query_tower, CodeIndex index) : qt_(std::move(query_tower)), index_(std::move(index)) {
    qt_->eval();
  }
  torch::Tensor embed(const torch::Tensor &query_ids) {
    torch::NoGradGuard no_grad;
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() in the constructor; guarded.
    return F::normalize(qt_->forward(query_ids), kUnit);
  }
  torch::Tensor search(const torch::Tensor &query_ids, int64_t k) {
    auto q = embed(query_ids);
    // BUG(torch-device-mismatch): build() offloaded the index to the host;
    // the query embeddings are on the towers' device.
    auto scores = torch::matmul(q, index_.embeddings.t());
    return std::get<1>(scores.topk(k, 1));
  }
  const CodeIndex &index() const { return index_; }

 private:
  Tower qt_;
  CodeIndex index_;
};

class Reranker {
 public:
  explicit Reranker(PairScorer scorer)
      : score_([scorer](const torch::Tensor &q, const torch::Tensor &c) mutable {
          // BUG(torch-eval-mode-missing): main() hands over the scorer
          // straight from its training loop; rerank() runs this under a guard.
          return scorer->forward(torch::cat({q.expand({c.size(0), kDim}), c}, 1)).squeeze(1);
        }) {}
  torch::Tensor rerank(const torch::Tensor &q, const torch::Tensor &candidates, const torch::Tensor &cand_ids) {
    torch::NoGradGuard no_grad;
    return cand_ids.index_select(0, score_(q, candidates).argsort(0, /*descending=*/true));
  }

 private:
  std::function<torch::Tensor(const torch::Tensor &, const torch::Tensor &)> score_;
};

}  // namespace codesearch

int main() {
  using namespace codesearch;
  torch::manual_seed(303);
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  const int64_t n_code = 4096, n_pairs = 2048;
  const auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto corpus = torch::randint(1, kVocab, {n_code, kCodeLen}, ids);
  auto queries = torch::randint(1, kVocab, {n_pairs, kQueryLen}, ids);
  auto positives = torch::randint(0, n_code, {n_pairs}, ids);

  Tower query_tower(0.1), code_tower(0.1);
  query_tower->to(device);
  code_tower->to(device);
  auto hard = mine_hard_negatives(code_tower, corpus, positives);

  std::vector<torch::Tensor> params = query_tower->parameters();
  for (const auto &p : code_tower->parameters())
    params.push_back(p);
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(3e-4));
  DivergenceGuard guard;
  const auto labels = torch::arange(kBatch, ids);
  for (int epoch = 0; epoch < 5; ++epoch) {
    query_tower->train();
    for (int64_t i = 0; i + kBatch <= n_pairs; i += kBatch) {
      opt.zero_grad();
      auto q = F::normalize(query_tower->forward(queries.slice(0, i, i + kBatch)), kUnit);
      auto code_ids = torch::cat({corpus.index_select(0, positives.slice(0, i, i + kBatch)),
                                  corpus.index_select(0, hard.slice(0, i, i + kBatch))});
      // BUG(torch-eval-mode-missing): mine_hard_negatives() left the code
      // tower in eval(); only the query tower is switched back to train().
      auto c = F::normalize(code_tower->forward(code_ids), kUnit);
      auto loss = F::cross_entropy(q.matmul(c.t()) / kTau, labels);
      loss.backward();
      opt.step();
      if (!guard.ok(loss))
        return 1;
    }
  }

  PairScorer scorer;
  scorer->to(device);
  torch::optim::Adam sopt(scorer->parameters(), torch::optim::AdamOptions(1e-3));
  for (int step = 0; step < 300; ++step) {
    auto pair = torch::randn({kBatch, 2 * kDim}, device);
    auto relevant = (pair.slice(1, 0, kDim) * pair.slice(1, kDim)).sum(1).gt(0).to(torch::kFloat);
    sopt.zero_grad();
    F::binary_cross_entropy_with_logits(scorer->forward(pair).squeeze(1), relevant).backward();
    sopt.step();
  }

  CodeIndex index = IndexBuilder(code_tower).batch_size(512).build(corpus);
  std::cout << "index consistency " << index_consistency(code_tower, corpus.slice(0, 512), index) << '\n';
  Retriever retriever(query_tower, index);
  Reranker reranker(scorer);
  int64_t hits = 0;
  for (int64_t i = 0; i < 256; ++i) {
    auto qi = queries.slice(0, i, i + 1);
    auto top = retriever.search(qi, 20).squeeze(0);
    auto cands = retriever.index().embeddings.index_select(0, top.cpu()).to(device);
    auto best = reranker.rerank(retriever.embed(qi), cands, top);
    hits += best[0].item<int64_t>() == positives[i].item<int64_t>() ? 1 : 0;
  }
  std::cout << "top-1 after rerank " << static_cast<double>(hits) / 256.0 << '\n';
  return 0;
}
