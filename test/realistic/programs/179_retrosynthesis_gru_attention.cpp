// Single-step retrosynthesis: an attention GRU encoder-decoder reads a
// product SMILES and writes the reactant SMILES (USPTO-50k style, character
// tokens). Training runs in bfloat16 autocast with 4 micro-batches per
// optimizer step because the lab workstation's card has 8 GB; evaluators
// are lambdas kept in a name -> std::function map that main() runs after
// every epoch. Overlong reactions throw out of the step and are skipped.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kVocab = 64, kPad = 0, kBos = 1, kEos = 2, kCarbon = 5;
constexpr int64_t kMaxLen = 120;

struct Batch {
  torch::Tensor src, tgt_in, tgt_out, src_pad;
  int64_t max_src_len = 0;
};

struct RetroNetImpl : nn::Module {
  RetroNetImpl(int64_t emb, int64_t hidden)
      : src_emb(register_module("src_emb", nn::Embedding(nn::EmbeddingOptions(kVocab, emb).padding_idx(kPad)))),
        tgt_emb(register_module("tgt_emb", nn::Embedding(nn::EmbeddingOptions(kVocab, emb).padding_idx(kPad)))),
        encoder(register_module("encoder", nn::GRU(nn::GRUOptions(emb, hidden).batch_first(true)))),
        decoder(register_module("decoder", nn::GRU(nn::GRUOptions(emb, hidden).batch_first(true)))),
        query(register_module("query", nn::Linear(hidden, hidden))),
        out(register_module("out", nn::Linear(2 * hidden, kVocab))),
        drop(register_module("drop", nn::Dropout(0.2))) {}

  // Returns the logits [B, T, V] and the attention weights [B, T, S].
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& src, const torch::Tensor& tgt_in,
                                                   const std::optional<torch::Tensor>& src_pad = std::nullopt) {
    auto [enc, h] = encoder->forward(drop(src_emb(src)));
    auto dec = std::get<0>(decoder->forward(drop(tgt_emb(tgt_in)), h));
    auto scores = torch::bmm(query(dec), enc.transpose(1, 2));
    if (src_pad)
      scores = scores.masked_fill(src_pad->unsqueeze(1), -1e4);
    auto attn = torch::softmax(scores, -1);
    return {out(drop(torch::cat({dec, torch::bmm(attn, enc)}, -1))), attn};
  }

  nn::Embedding src_emb, tgt_emb;
  nn::GRU encoder, decoder;
  nn::Linear query, out;
  nn::Dropout drop;
};
TORCH_MODULE(RetroNet);

void check_batch(const Batch& b) {
  if (b.max_src_len > kMaxLen)
    throw std::length_error("product SMILES longer than " + std::to_string(kMaxLen) + " tokens");
}

class RetroTrainer {
 public:
  RetroTrainer(RetroNet net, torch::Device device, int64_t accum)
      : net_(std::move(net)), device_(device), accum_(accum),
        opt_(net_->parameters(), torch::optim::AdamWOptions(3e-4).weight_decay(0.01)),
        token_weight_(torch::ones({kVocab})) {
    // Carbon is a third of all reactant tokens; down-weight it.
    token_weight_[kCarbon] = 0.5;
  }

  void train_step(const Batch& b) {
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    // BUG(torch-autocast-region): check_batch() throws for an overlong
    // reaction; main() catches it and carries on with autocast still on.
    at::autocast::set_enabled(true);
    check_batch(b);
    auto [logits, attn] = net_->forward(b.src, b.tgt_in, b.src_pad);
    // BUG(torch-device-mismatch): token_weight_ was built on the CPU in the
    // constructor; the logits and targets are on device_.
    auto loss = F::cross_entropy(logits.reshape({-1, kVocab}).to(torch::kFloat), b.tgt_out.reshape(-1),
                                 F::CrossEntropyFuncOptions().weight(token_weight_).ignore_index(kPad));
    at::autocast::set_enabled(false);
    // BUG(torch-grad-accumulation-unscaled): a mean loss, accumulated over
    // accum_ micro-batches per step and never divided by accum_.
    loss.backward();
    if (++micro_ % accum_ == 0) {
      nn::utils::clip_grad_norm_(net_->parameters(), 1.0);
      opt_.step();
      opt_.zero_grad();
    }
  }

  RetroNet& net() { return net_; }

 private:
  RetroNet net_;
  torch::Device device_;
  int64_t accum_;
  int64_t micro_ = 0;
  torch::optim::AdamW opt_;
  torch::Tensor token_weight_;
};

Batch make_batch(const std::vector<std::vector<int64_t>>& products, const std::vector<std::vector<int64_t>>& reactants,
                 torch::Device device) {
  const int64_t n = static_cast<int64_t>(products.size());
  int64_t s = 0, t = 0;
  for (const auto& p : products) s = std::max<int64_t>(s, static_cast<int64_t>(p.size()));
  for (const auto& r : reactants) t = std::max<int64_t>(t, static_cast<int64_t>(r.size()) + 1);
  auto src = torch::full({n, s}, kPad, torch::kLong);
  auto tgt = torch::full({n, t + 1}, kPad, torch::kLong);
  for (int64_t i = 0; i < n; ++i) {
    const auto& p = products[static_cast<size_t>(i)];
    const auto& r = reactants[static_cast<size_t>(i)];
    src[i].narrow(0, 0, static_cast<int64_t>(p.size())).copy_(torch::tensor(p));
    tgt[i][0] = kBos;
    tgt[i].narrow(0, 1, static_cast<int64_t>(r.size())).copy_(torch::tensor(r));
    tgt[i][static_cast<int64_t>(r.size()) + 1] = kEos;
  }
  // BUG(torch-non-blocking-pageable): src comes from torch::full on the CPU,
  // never pinned; non_blocking does nothing.
  auto src_dev = src.to(device, /*non_blocking=*/true);
  auto tgt_dev = tgt.to(device);
  return {src_dev, tgt_dev.narrow(1, 0, t), tgt_dev.narrow(1, 1, t), src_dev.eq(kPad), s};
}

std::vector<int64_t> greedy(RetroNet& net, const torch::Tensor& src) {
  torch::NoGradGuard no_grad;
  auto tgt = torch::full({1, 1}, kBos, src.options());
  std::vector<int64_t> out;
  for (int64_t step = 0; step < kMaxLen; ++step) {
    // OK(torch-inference-without-no-grad, torch-eval-mode-missing): guarded,
    // and the exact-match evaluator calls eval() before decoding.
    auto logits = std::get<0>(net->forward(src, tgt));
    auto next = logits.select(1, -1).argmax(-1, /*keepdim=*/true);
    const int64_t id = next.item<int64_t>();
    if (id == kEos)
      break;
    out.push_back(id);
    tgt = torch::cat({tgt, next}, 1);
  }
  return out;
}

std::vector<int64_t> random_smiles(int64_t len) {
  auto t = torch::randint(3, kVocab, {len}, torch::kLong);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + len);
}

int main() {
  torch::manual_seed(179);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  std::vector<Batch> train, val;
  for (int64_t i = 0; i < 220; ++i) {
    std::vector<std::vector<int64_t>> products, reactants;
    for (int64_t j = 0; j < 16; ++j) {
      products.push_back(random_smiles(20 + (i * 7 + j) % 120));
      reactants.push_back(random_smiles(24 + (i * 5 + j) % 60));
    }
    (i < 200 ? train : val).push_back(make_batch(products, reactants, device));
  }

  RetroNet net(128, 256);
  net->to(device);
  RetroTrainer trainer(net, device, /*accum=*/4);

  std::map<std::string, std::function<double()>> evaluators;
  evaluators["token_acc"] = [&]() {
    net->eval();
    int64_t correct = 0, total = 0;
    for (const auto& b : val) {
      // BUG(torch-inference-without-no-grad): the evaluator never takes a
      // NoGradGuard; every validation forward builds a graph.
      auto [logits, attn] = net->forward(b.src, b.tgt_in, b.src_pad);
      auto keep = b.tgt_out.ne(kPad);
      correct += logits.argmax(-1).eq(b.tgt_out).logical_and(keep).sum().item<int64_t>();
      total += keep.sum().item<int64_t>();
    }
    net->train();
    return static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(total, 1));
  };
  evaluators["exact_match"] = [&]() {
    net->eval();
    int64_t hits = 0;
    for (const auto& b : val) {
      auto pred = greedy(net, b.src.narrow(0, 0, 1).narrow(1, 0, b.max_src_len));
      auto ref = b.tgt_out[0];
      const auto n = static_cast<int64_t>(pred.size());
      hits += (n < ref.size(0) && ref[n].item<int64_t>() == kEos &&
               torch::equal(ref.narrow(0, 0, n).cpu(), torch::tensor(pred)))
                  ? 1
                  : 0;
    }
    net->train();
    return static_cast<double>(hits) / static_cast<double>(val.size());
  };

  net->train();
  for (int64_t epoch = 0; epoch < 10; ++epoch) {
    int64_t skipped = 0;
    for (const auto& b : train) {
      try {
        trainer.train_step(b);
      } catch (const std::length_error& e) {
        ++skipped;
      }
    }
    std::cout << "epoch " << epoch << " skipped " << skipped;
    for (const auto& [name, fn] : evaluators)
      std::cout << ' ' << name << '=' << fn();
    std::cout << '\n';
  }
  torch::save(net, "retro_gru.pt");
}
