// Latin -> Cyrillic transliteration with a GRU encoder and a GRUCell decoder
// trained with teacher forcing. Validation has two parts: a teacher-forced
// token accuracy, and exact-match of beam-search decodes (the beam helper
// re-runs the model on each hypothesis' prefix). The trainer keeps its update
// logic in member functions; one extra fine-tune step on a batch of very long
// words gets a retry when the GPU runs out of memory.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kSrcVocab = 30, kTgtVocab = 36, kPad = 0, kBos = 1, kEos = 2, kMaxLen = 16;

struct TranslitNetImpl : torch::nn::Module {
  TranslitNetImpl()
      : src_emb(register_module("src_emb", torch::nn::Embedding(kSrcVocab, 64))),
        tgt_emb(register_module("tgt_emb", torch::nn::Embedding(kTgtVocab, 64))),
        encoder(register_module("encoder", torch::nn::GRU(torch::nn::GRUOptions(64, 128).batch_first(true)))),
        decoder(register_module("decoder", torch::nn::GRUCell(64, 128))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        out(register_module("out", torch::nn::Linear(128, kTgtVocab))) {}

  // src [B, S], tgt_in [B, T] (starts with kBos) -> logits [B, T, kTgtVocab]
  torch::Tensor forward(const torch::Tensor &src, const torch::Tensor &tgt_in) {
    auto h = std::get<1>(encoder(drop(src_emb(src)))).squeeze(0);
    auto emb = drop(tgt_emb(tgt_in));
    std::vector<torch::Tensor> steps;
    for (int64_t t = 0; t < tgt_in.size(1); ++t) {
      h = decoder(emb.select(1, t), h);
      // OK(torch-loss-accumulation-graph, torch-inference-without-no-grad):
      // the per-step logits are stacked and returned to the caller.
      steps.push_back(out(drop(h)));
    }
    return torch::stack(steps, 1);
  }

  torch::nn::Embedding src_emb, tgt_emb;
  torch::nn::GRU encoder;
  torch::nn::GRUCell decoder;
  torch::nn::Dropout drop;
  torch::nn::Linear out;
};
TORCH_MODULE(TranslitNet);

struct Pairs {
  torch::Tensor src, tgt_in, tgt_out;
};

// Each source letter maps to one target letter, shifted by a fixed offset.
Pairs synth_pairs(int64_t n, int64_t len, torch::Device device) {
  auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto src = torch::randint(3, kSrcVocab, {n, len}, ids);
  auto tgt = (src + 4).clamp_max(kTgtVocab - 1);
  auto bos = torch::full({n, 1}, kBos, ids), eos = torch::full({n, 1}, kEos, ids);
  return {src, torch::cat({bos, tgt}, 1), torch::cat({tgt, eos}, 1)};
}

class TranslitTrainer {
public:
  TranslitTrainer(TranslitNet net, double lr)
      : net_(std::move(net)), opt_(net_->parameters(), torch::optim::AdamOptions(lr)) {}

  std::map<std::string, torch::Tensor> train_epoch(const std::vector<Pairs> &data) {
    begin_epoch();
    std::map<std::string, torch::Tensor> sums;
    sums["xent"] = torch::zeros({}, data.front().src.options().dtype(torch::kFloat));
    sums["tokens"] = torch::zeros({}, data.front().src.options());
    for (const auto &batch : data) {
      auto loss = token_loss(batch);
      loss.backward();
      apply_update();
      // BUG(torch-loss-accumulation-graph): the map outlives the loop and the
      // loss still holds its graph.
      sums["xent"] += loss;
      // OK(torch-loss-accumulation-graph): a count of tokens has no graph.
      sums["tokens"] += batch.tgt_out.ne(kPad).sum();
    }
    return sums;
  }

  // One step on a batch of unusually long words; retried once after an OOM.
  void train_long_batch(const Pairs &batch) {
    bool retry = false;
    try {
      update_on(batch);
    } catch (const c10::OutOfMemoryError &e) {
      std::cerr << "long batch ran out of memory: " << e.what() << '\n';
      // BUG(torch-empty-cache-oom-retry): the same batch is run again below
      // at the same size; the allocator already released its cache.
      c10::cuda::CUDACachingAllocator::emptyCache();
      retry = true;
    }
    if (retry)
      update_on(batch);
  }

  TranslitNet model() const { return net_; }

private:
  void begin_epoch() {
    net_->train();
    opt_.zero_grad();
  }

  torch::Tensor token_loss(const Pairs &batch) {
    // OK(torch-eval-mode-missing): begin_epoch() and update_on() call train().
    auto logits = net_->forward(batch.src, batch.tgt_in);
    return F::cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(),
                            F::CrossEntropyFuncOptions().ignore_index(kPad));
  }

  void apply_update() {
    torch::nn::utils::clip_grad_norm_(net_->parameters(), 1.0);
    // BUG(torch-missing-zero-grad): begin_epoch() resets the gradients once
    // per epoch; every later step adds the earlier batches' gradients again.
    opt_.step();
  }

  void update_on(const Pairs &batch) {
    net_->train();
    opt_.zero_grad();
    token_loss(batch).backward();
    torch::nn::utils::clip_grad_norm_(net_->parameters(), 1.0);
    opt_.step();
  }

  TranslitNet net_;
  torch::optim::Adam opt_;
};

double teacher_forced_accuracy(TranslitNet &net, const std::vector<Pairs> &val) {
  net->eval();
  int64_t correct = 0, total = 0;
  for (const auto &p : val) {
    // BUG(torch-inference-without-no-grad): the model is in eval() but
    // autograd still records every decoder step of every batch.
    auto pred = net->forward(p.src, p.tgt_in).argmax(-1);
    auto mask = p.tgt_out.ne(kPad);
    correct += pred.eq(p.tgt_out).logical_and(mask).sum().item<int64_t>();
    total += mask.sum().item<int64_t>();
  }
  net->train();
  return static_cast<double>(correct) / static_cast<double>(total);
}

struct Hypothesis {
  std::vector<int64_t> tokens;
  double log_prob;
};

std::vector<int64_t> beam_decode(TranslitNet &net, const torch::Tensor &src, int64_t beam) {
  std::vector<Hypothesis> hyps{{{kBos}, 0.0}};
  for (int64_t t = 0; t < kMaxLen; ++t) {
    std::vector<Hypothesis> next;
    for (const auto &h : hyps) {
      if (h.tokens.back() == kEos) {
        next.push_back(h);
        continue;
      }
      auto prefix = torch::tensor(h.tokens, src.options()).unsqueeze(0);
      // BUG(torch-eval-mode-missing): exact_match() receives the model in
      // training mode (the trainer's last update_on() called train()), so
      // Dropout perturbs every beam step.
      auto logits = net->forward(src, prefix).select(1, -1).squeeze(0);
      auto top = torch::log_softmax(logits, -1).topk(beam);
      auto vals = std::get<0>(top).cpu(), idx = std::get<1>(top).cpu();
      for (int64_t k = 0; k < beam; ++k) {
        auto tokens = h.tokens;
        tokens.push_back(idx[k].item<int64_t>());
        next.push_back({tokens, h.log_prob + vals[k].item<double>()});
      }
    }
    std::sort(next.begin(), next.end(),
              [](const Hypothesis &a, const Hypothesis &b) { return a.log_prob > b.log_prob; });
    next.resize(std::min<size_t>(next.size(), static_cast<size_t>(beam)));
    hyps = std::move(next);
  }
  return hyps.front().tokens;
}

double exact_match(TranslitNet net, const Pairs &val, int64_t beam) {
  torch::NoGradGuard no_grad;
  int64_t hits = 0;
  const int64_t n = std::min<int64_t>(val.src.size(0), 32);
  for (int64_t i = 0; i < n; ++i) {
    auto decoded = beam_decode(net, val.src.narrow(0, i, 1), beam);
    auto gold = val.tgt_out[i].cpu();
    bool same = static_cast<int64_t>(decoded.size()) == gold.size(0) + 1;
    for (int64_t t = 0; same && t < gold.size(0); ++t)
      same = decoded[t + 1] == gold[t].item<int64_t>();
    hits += same ? 1 : 0;
  }
  return static_cast<double>(hits) / static_cast<double>(n);
}

int main() {
  torch::manual_seed(141);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  std::vector<Pairs> train, val;
  for (int i = 0; i < 64; ++i)
    train.push_back(synth_pairs(64, 6 + i % 5, device));
  for (int i = 0; i < 4; ++i)
    val.push_back(synth_pairs(128, 8, device));

  TranslitNet net;
  net->to(device);
  TranslitTrainer trainer(net, 1e-3);
  for (int epoch = 0; epoch < 6; ++epoch) {
    auto sums = trainer.train_epoch(train);
    auto mean = sums["xent"].item<double>() / static_cast<double>(train.size());
    std::cout << "epoch " << epoch << " xent " << mean << " tokens " << sums["tokens"].item<int64_t>()
              << " tf-acc " << teacher_forced_accuracy(net, val) << '\n';
  }
  trainer.train_long_batch(synth_pairs(256, kMaxLen - 2, device));
  std::cout << "beam exact match " << exact_match(trainer.model(), val.front(), 4) << '\n';
  return 0;
}
