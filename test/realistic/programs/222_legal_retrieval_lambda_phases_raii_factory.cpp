// Case-law retrieval for a legal research tool: a bi-encoder embeds queries
// and court opinions (hashed token ids) into one space and is trained with
// in-batch negatives plus hard negatives mined from the corpus each epoch; a
// cross-encoder reranker, loaded pre-trained from a factory, reorders the
// top candidates and is then fine-tuned on the clicks that the research
// attorneys logged. Mode switches of the bi-encoder go through two small
// lambdas and an RAII guard.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kVocab = 30000;
constexpr int64_t kLen = 48;
constexpr int64_t kDim = 128;

struct Pairs {
  torch::Tensor query;  // [B, kLen] token ids
  torch::Tensor doc;    // [B, kLen] token ids of the relevant opinion
};

Pairs synth_pairs(int64_t n, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto topic = torch::randint(0, 500, {n, 1}, gen, torch::kLong);
  auto query = (topic * 37 + torch::randint(0, 40, {n, kLen}, gen, torch::kLong)) % kVocab;
  auto doc = (topic * 37 + torch::randint(0, 60, {n, kLen}, gen, torch::kLong)) % kVocab;
  return {query, doc};
}

struct BiEncoderImpl : torch::nn::Module {
  BiEncoderImpl()
      : tok(register_module("tok", torch::nn::Embedding(kVocab, kDim))),
        proj(register_module("proj", torch::nn::Linear(kDim, kDim))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})))),
        drop(register_module("drop", torch::nn::Dropout(0.1))) {}

  // Unit-norm text embedding [B, kDim] of token ids [B, kLen].
  torch::Tensor embed(const torch::Tensor &ids) {
    auto h = drop->forward(tok->forward(ids)).mean(1);
    return F::normalize(norm->forward(proj->forward(h)), F::NormalizeFuncOptions().dim(1));
  }
  // Similarity logits of every query against every document [B, B].
  torch::Tensor forward(const torch::Tensor &query, const torch::Tensor &doc) {
    return embed(query).mm(embed(doc).t()) / 0.05;
  }

  torch::nn::Embedding tok;
  torch::nn::Linear proj;
  torch::nn::LayerNorm norm;
  torch::nn::Dropout drop;
};
TORCH_MODULE(BiEncoder);

struct RerankerImpl : torch::nn::Module {
  RerankerImpl()
      : mlp(register_module("mlp", torch::nn::Sequential(torch::nn::Linear(3 * kDim, 256), torch::nn::BatchNorm1d(256),
                                                         torch::nn::ReLU(), torch::nn::Dropout(0.2),
                                                         torch::nn::Linear(256, 1)))) {}
  // Relevance logit [B] of (query, doc) embedding pairs.
  torch::Tensor forward(const torch::Tensor &q, const torch::Tensor &d) {
    return mlp->forward(torch::cat({q, d, q * d}, 1)).squeeze(1);
  }
  torch::nn::Sequential mlp;
};
TORCH_MODULE(Reranker);

// Loads the released reranker, ready to serve.
Reranker load_reranker(const std::string &path, torch::Device device) {
  Reranker r;
  if (!path.empty())
    torch::load(r, path);
  r->to(device);
  r->eval();
  return r;
}

// Switches a module's mode for a scope and puts the old one back.
class ModeScope {
 public:
  ModeScope(torch::nn::Module &m, bool training) : m_(m), saved_(m.is_training()) { m_.train(training); }
  ~ModeScope() { m_.train(saved_); }
  ModeScope(const ModeScope &) = delete;
  ModeScope &operator=(const ModeScope &) = delete;

 private:
  torch::nn::Module &m_;
  bool saved_;
};

// For each query, the corpus document it scores highest that is not its own.
torch::Tensor mine_hard_negatives(BiEncoder &enc, const Pairs &batch, const torch::Tensor &corpus,
                                  torch::Device device) {
  ModeScope scope(*enc, /*training=*/false);
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): the scope switched the encoder to eval().
  auto q = enc->embed(batch.query.to(device));
  torch::Tensor best_score, best_idx;
  for (int64_t start = 0; start < corpus.size(0); start += 256) {
    auto chunk = corpus.narrow(0, start, std::min<int64_t>(256, corpus.size(0) - start)).to(device);
    // OK(torch-eval-mode-missing): same scope.
    auto [s, i] = q.mm(enc->embed(chunk).t()).max(1);
    if (!best_score.defined()) {
      best_score = s;
      best_idx = i;
    } else {
      auto better = s > best_score;
      best_score = torch::where(better, s, best_score);
      best_idx = torch::where(better, i + start, best_idx);
    }
  }
  // BUG(torch-host-sync-in-loop): the miner runs on every training step and
  // waits for the device to hand back the indices.
  return corpus.index_select(0, best_idx.cpu());
}

void train_epoch(BiEncoder &enc, torch::optim::Optimizer &opt, const torch::Tensor &corpus, uint64_t epoch,
                 torch::Device device, std::vector<torch::Tensor> &history) {
  for (int64_t b = 0; b < 60; ++b) {
    auto batch = synth_pairs(32, epoch * 1000 + static_cast<uint64_t>(b));
    auto hard = mine_hard_negatives(enc, batch, corpus, device);
    opt.zero_grad();
    // OK(torch-eval-mode-missing): the scope inside the miner restored
    // train() before this training forward.
    auto logits = enc->forward(batch.query.to(device), torch::cat({batch.doc, hard}).to(device));
    auto target = torch::arange(32, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto loss = F::cross_entropy(logits, target);
    loss.backward();
    opt.step();
    // BUG(torch-loss-accumulation-graph): the caller's loss curve keeps the
    // graph of every batch.
    history.push_back(loss);
  }
}

// Recall@10 of the relevant opinion among the development corpus.
double recall_at_10(BiEncoder &enc, const Pairs &dev, torch::Device device) {
  torch::NoGradGuard no_grad;
  int64_t hits = 0;
  for (int64_t start = 0; start < dev.query.size(0); start += 64) {
    // BUG(torch-eval-mode-missing): the epoch loop calls begin_eval() only
    // after this: dropout is still on in the embeddings.
    auto sims = enc->forward(dev.query.narrow(0, start, 64).to(device), dev.doc.to(device));
    auto top = std::get<1>(sims.topk(10, 1));
    auto gold = torch::arange(start, start + 64, top.options()).unsqueeze(1);
    hits += top.eq(gold).any(1).sum().item<int64_t>();
  }
  return static_cast<double>(hits) / static_cast<double>(dev.query.size(0));
}

// Embeds the corpus for the nearest-neighbour index.
torch::Tensor build_index(BiEncoder &enc, const torch::Tensor &corpus, torch::Device device) {
  std::vector<torch::Tensor> rows;
  for (int64_t start = 0; start < corpus.size(0); start += 256) {
    auto chunk = corpus.narrow(0, start, std::min<int64_t>(256, corpus.size(0) - start)).to(device);
    // BUG(torch-inference-without-no-grad): indexing never trains, yet
    // autograd records every chunk of the corpus.
    // OK(torch-eval-mode-missing): begin_eval() ran before the index build.
    rows.push_back(enc->embed(chunk).detach());
  }
  return torch::cat(rows);
}

// Fine-tunes the reranker on logged (query, clicked, skipped) triples.
void finetune_reranker(Reranker &rr, BiEncoder &enc, torch::Device device) {
  torch::optim::Adam opt(rr->parameters(), torch::optim::AdamOptions(1e-4));
  enc->eval();
  for (int64_t step = 0; step < 100; ++step) {
    auto batch = synth_pairs(32, 777000 + static_cast<uint64_t>(step));
    auto skipped = synth_pairs(32, 888000 + static_cast<uint64_t>(step)).doc;
    torch::Tensor q, pos, neg;
    {
      torch::NoGradGuard no_grad;
      q = enc->embed(batch.query.to(device));
      pos = enc->embed(batch.doc.to(device));
      neg = enc->embed(skipped.to(device));
    }
    opt.zero_grad();
    // BUG(torch-eval-mode-missing): load_reranker() returned the reranker in
    // eval(); it is fine-tuned with dropout off and frozen batch statistics.
    auto margin = rr->forward(q, pos) - rr->forward(q, neg);
    F::softplus(-margin).mean().backward();
    opt.step();
  }
}

int main(int argc, char **argv) {
  torch::manual_seed(222);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  BiEncoder enc;
  enc->to(device);
  torch::optim::AdamW opt(enc->parameters(), torch::optim::AdamWOptions(2e-4).weight_decay(0.01));
  auto corpus = synth_pairs(2048, 5).doc;
  auto dev = synth_pairs(256, 6);

  auto begin_fit = [&enc] { enc->train(); };
  auto begin_eval = [&enc] { enc->eval(); };
  std::vector<torch::Tensor> history;
  torch::Tensor index;
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    begin_fit();
    train_epoch(enc, opt, corpus, epoch, device, history);
    const double r10 = recall_at_10(enc, dev, device);
    begin_eval();
    index = build_index(enc, corpus, device);
    std::cout << "epoch " << epoch << " recall@10 " << r10 << " last loss " << history.back().item<double>() << '\n';
  }

  Reranker rr = load_reranker(argc > 1 ? argv[1] : "", device);
  {
    torch::NoGradGuard no_grad;
    // OK(torch-eval-mode-missing): every epoch, the last one included, ends
    // with begin_eval().
    auto q = enc->embed(dev.query.narrow(0, 0, 8).to(device));
    auto cand = index.narrow(0, 0, 8);
    // OK(torch-eval-mode-missing): the factory returned it in eval().
    auto scores = rr->forward(q, cand);
    std::cout << "rerank scores " << scores.cpu() << '\n';
  }
  finetune_reranker(rr, enc, device);
  torch::save(rr, "reranker_ft.pt");
  return 0;
}
