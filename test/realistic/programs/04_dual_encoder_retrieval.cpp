// Dense retrieval: a query encoder and a document encoder trained with an
// in-batch contrastive loss, then evaluated with recall@1 over an index.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <vector>

struct RetrievalConfig {
  int64_t vocab = 5000;
  int64_t dim = 128;
  int64_t seq_len = 24;
  int64_t batch = 64;
  double temperature = 0.05;
};

struct PairBatch {
  torch::Tensor queries;  // [B, L] token ids
  torch::Tensor docs;     // [B, L] token ids

  // The tokenizer hands out transposed [L, B] buffers.
  void to_batch_major() {
    queries = queries.t();
    docs = docs.t();
    // BUG(torch-tensor-to-discarded): contiguous() returns a new tensor;
    // queries stays a strided view.
    queries.contiguous();
    docs = docs.contiguous();
  }
};

std::vector<PairBatch> make_pairs(const RetrievalConfig &cfg, int64_t batches) {
  std::vector<PairBatch> out;
  for (int64_t i = 0; i < batches; ++i) {
    PairBatch b{torch::randint(0, cfg.vocab, {cfg.seq_len, cfg.batch}, torch::kLong),
                torch::randint(0, cfg.vocab, {cfg.seq_len, cfg.batch}, torch::kLong)};
    b.to_batch_major();
    out.push_back(b);
  }
  return out;
}

struct TextEncoderImpl : torch::nn::Module {
  TextEncoderImpl(int64_t vocab, int64_t dim)
      : emb(register_module("emb", torch::nn::Embedding(vocab, dim))),
        proj(register_module("proj", torch::nn::Linear(dim, dim))) {}
  torch::Tensor forward(torch::Tensor tokens) {
    auto pooled = emb(tokens).mean(1);
    return torch::nn::functional::normalize(
        proj(pooled), torch::nn::functional::NormalizeFuncOptions().dim(-1));
  }
  torch::nn::Embedding emb;
  torch::nn::Linear proj;
};
TORCH_MODULE(TextEncoder);

// The positives of an in-batch contrastive loss sit on the diagonal.
torch::Tensor make_targets(int64_t n) { return torch::arange(n, torch::kLong); }

class ContrastiveTrainer {
 public:
  ContrastiveTrainer(TextEncoder q_enc, TextEncoder d_enc, const RetrievalConfig &cfg, torch::Device device)
      : q_enc_(q_enc), d_enc_(d_enc), cfg_(cfg), device_(device) {
    q_enc_->to(device_);
    d_enc_->to(device_);
  }

  void fit(const std::vector<PairBatch> &data) {
    std::vector<torch::Tensor> params = q_enc_->parameters();
    for (auto &p : d_enc_->parameters())
      params.push_back(p);
    torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-4));
    auto total = torch::zeros({}, device_);
    for (const auto &b : data) {
      auto q = q_enc_->forward(b.queries.to(device_));
      auto d = d_enc_->forward(b.docs.to(device_));
      auto logits = torch::mm(q, d.t()) / cfg_.temperature;
      // BUG(torch-device-mismatch): logits are on device_, the targets from
      // make_targets() are a CPU factory result.
      auto loss_qd = torch::nn::functional::cross_entropy(logits, make_targets(logits.size(0)));
      // OK(torch-device-mismatch): a loss module has no parameters to move.
      auto loss_dq = criterion_(logits.t(), make_targets(logits.size(0)).to(device_));
      auto loss = (loss_qd + loss_dq) / 2;
      opt.zero_grad();
      loss.backward();
      opt.step();
      total += loss.detach();
    }
    std::cout << "mean loss " << (total / static_cast<double>(data.size())).item<double>() << '\n';
  }

 private:
  TextEncoder q_enc_, d_enc_;
  RetrievalConfig cfg_;
  torch::Device device_;
  torch::nn::CrossEntropyLoss criterion_;
};

torch::Tensor build_index(TextEncoder &d_enc, const std::vector<PairBatch> &data,
                          torch::Device device) {
  // OK(torch-inference-without-no-grad): the whole index is built without autograd.
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> rows;
  for (const auto &b : data)
    rows.push_back(d_enc->forward(b.docs.to(device)));
  return torch::cat(rows);
}

double recall_at_1(TextEncoder &q_enc, const torch::Tensor &index,
                   const std::vector<PairBatch> &data, torch::Device device) {
  int64_t hits = 0, seen = 0, offset = 0;
  for (const auto &b : data) {
    // BUG(torch-inference-without-no-grad): evaluation loop, no backward, no guard.
    auto q = q_enc->forward(b.queries.to(device));
    auto best = torch::mm(q, index.t()).argmax(1);
    auto expected = torch::arange(offset, offset + q.size(0), torch::TensorOptions().dtype(torch::kLong).device(device));
    hits += best.eq(expected).sum().item<int64_t>();
    seen += q.size(0);
    offset += q.size(0);
  }
  return seen == 0 ? 0.0 : static_cast<double>(hits) / seen;
}

int main() {
  RetrievalConfig cfg;
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  TextEncoder q_enc(cfg.vocab, cfg.dim), d_enc(cfg.vocab, cfg.dim);
  ContrastiveTrainer trainer(q_enc, d_enc, cfg, device);
  auto train_set = make_pairs(cfg, 20);
  auto eval_set = make_pairs(cfg, 4);
  trainer.fit(train_set);
  // OK(torch-device-mismatch): the holders share their modules with the
  // trainer's, which its constructor moved to 'device'.
  auto index = build_index(d_enc, eval_set, device);
  // OK(torch-device-mismatch): the same shared, moved query encoder.
  std::cout << "recall@1 " << recall_at_1(q_enc, index, eval_set, device) << '\n';
  return 0;
}
