// Prior-art search over patent claims. Two interchangeable claim encoders (a
// mean-pooled bag of embeddings and a 1-D convnet with dropout) share one
// contrastive training routine and one indexing routine, both templates over
// the encoder type. Placement goes through a free function over
// torch::nn::Module&, the search service may mirror the index on another card
// (a std::optional<torch::Device> in its config), and a latency probe for the
// SLO dashboard runs first thing in main.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kVocab = 20000, kLen = 48, kEmb = 128, kDim = 96;

torch::Tensor tokenize(const std::string &text) {
  std::vector<int64_t> ids;
  std::istringstream words(text);
  std::string w;
  while (words >> w && static_cast<int64_t>(ids.size()) < kLen)
    ids.push_back(static_cast<int64_t>(std::hash<std::string>{}(w) % kVocab));
  ids.resize(kLen, 0);
  return torch::tensor(ids, torch::TensorOptions().dtype(torch::kLong)).unsqueeze(0);
}

struct BagEncoderImpl : torch::nn::Module {
  BagEncoderImpl()
      : emb(register_module("emb", torch::nn::Embedding(kVocab, kEmb))),
        proj(register_module("proj", torch::nn::Linear(kEmb, kDim))) {}
  torch::Tensor forward(const torch::Tensor &ids) { return proj(emb(ids).mean(1)); }
  torch::nn::Embedding emb;
  torch::nn::Linear proj;
};
TORCH_MODULE(BagEncoder);

struct ConvEncoderImpl : torch::nn::Module {
  ConvEncoderImpl()
      : emb(register_module("emb", torch::nn::Embedding(kVocab, kEmb))),
        conv(register_module("conv", torch::nn::Conv1d(torch::nn::Conv1dOptions(kEmb, 256, 5).padding(2)))),
        drop(register_module("drop", torch::nn::Dropout(0.1))),
        proj(register_module("proj", torch::nn::Linear(256, kDim))) {}
  torch::Tensor forward(const torch::Tensor &ids) {
    auto h = torch::relu(conv(emb(ids).transpose(1, 2))).amax(2);
    return proj(drop(h));
  }
  torch::nn::Embedding emb;
  torch::nn::Conv1d conv;
  torch::nn::Dropout drop;
  torch::nn::Linear proj;
};
TORCH_MODULE(ConvEncoder);

struct ClaimCorpus {
  torch::Tensor claims;  // [N, kLen] token ids

  // A claim and a paraphrase of it (a fifth of the tokens swapped).
  std::pair<torch::Tensor, torch::Tensor> positive_pairs(int64_t n) const {
    auto idx = torch::randint(0, claims.size(0), {n}, torch::kLong);
    auto a = claims.index_select(0, idx);
    auto b = torch::where(torch::rand(a.sizes()) < 0.2, torch::randint_like(a, kVocab), a);
    return {a, b};
  }
};

void place(torch::nn::Module &module, torch::Device device) { module.to(device); }

template <class Encoder> double probe_latency_ms(Encoder &enc) {
  torch::NoGradGuard no_grad;
  enc->eval();
  // BUG(torch-cuda-unguarded): main() runs the probe before it looks at
  // torch::cuda::is_available(); a CPU-only runner crashes here.
  enc->to(torch::kCUDA);
  auto ids = torch::randint(0, kVocab, {64, kLen}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i)
    // OK(torch-inference-without-no-grad): the probe holds a NoGradGuard.
    enc->forward(ids);
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / 20.0;
}

template <class Encoder> void train_contrastive(Encoder &enc, const ClaimCorpus &corpus, torch::Device device, int steps) {
  torch::optim::AdamW opt(enc->parameters(), torch::optim::AdamWOptions(2e-4));
  enc->train();
  auto running = torch::zeros({}, device);
  for (int step = 0; step < steps; ++step) {
    auto [a, b] = corpus.positive_pairs(64);
    // OK(torch-device-mismatch): both views are moved to the encoder's device.
    auto za = F::normalize(enc->forward(a.to(device)), F::NormalizeFuncOptions().dim(1));
    auto zb = F::normalize(enc->forward(b.to(device)), F::NormalizeFuncOptions().dim(1));
    auto logits = za.matmul(zb.t()) / 0.05;
    auto labels = torch::arange(64, torch::kLong);
    // BUG(torch-device-mismatch): the InfoNCE targets come from arange on the
    // CPU, the similarity logits are on `device`.
    auto loss = F::cross_entropy(logits, labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
    // OK(torch-loss-accumulation-graph): detached before it is summed.
    running += loss.detach();
    if (step % 100 == 99) {
      // OK(torch-host-sync-in-loop): once every 100 steps.
      std::cout << "step " << step + 1 << " infonce " << running.item<double>() / 100.0 << "\n";
      running.zero_();
    }
  }
}

template <class Encoder> torch::Tensor build_index(Encoder &enc, const torch::Tensor &claims, torch::Device device) {
  enc->eval();
  auto index = torch::empty({claims.size(0), kDim}, torch::TensorOptions().device(device));
  for (int64_t start = 0; start < claims.size(0); start += 256) {
    const int64_t n = std::min<int64_t>(256, claims.size(0) - start);
    auto chunk = claims.narrow(0, start, n).to(device);
    // BUG(torch-inference-without-no-grad): indexing the whole corpus with
    // autograd on; every chunk's activations are recorded.
    auto z = F::normalize(enc->forward(chunk), F::NormalizeFuncOptions().dim(1));
    index.narrow(0, start, n).copy_(z);
  }
  return index;
}

struct SearchConfig {
  std::optional<torch::Device> mirror;
  int64_t top_k = 5;
};

SearchConfig make_search_config() {
  SearchConfig cfg;
  if (torch::cuda::is_available())
    // BUG(torch-device-index-unchecked): the mirror card is hard-coded to
    // ordinal 2, never compared with torch::cuda::device_count().
    cfg.mirror = torch::Device(torch::kCUDA, 2);
  return cfg;
}

std::vector<int64_t> search(BagEncoder &enc, const torch::Tensor &index, const std::string &query,
                            const SearchConfig &cfg, torch::Device device) {
  torch::NoGradGuard no_grad;
  enc->eval();
  auto q = F::normalize(enc->forward(tokenize(query).to(device)), F::NormalizeFuncOptions().dim(1));
  const torch::Device target = cfg.mirror.value_or(device);
  // OK(torch-device-mismatch): both operands are moved to the same target.
  auto scores = torch::matmul(q.to(target), index.to(target).t()).squeeze(0);
  auto top = std::get<1>(scores.topk(cfg.top_k)).cpu();
  return std::vector<int64_t>(top.data_ptr<int64_t>(), top.data_ptr<int64_t>() + top.numel());
}

int main() {
  torch::manual_seed(170);
  BagEncoder bag;
  std::cout << "bag encoder latency " << probe_latency_ms(bag) << " ms\n";

  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  ClaimCorpus corpus{torch::randint(1, kVocab, {5000, kLen}, torch::kLong)};

  ConvEncoder conv;
  place(*bag, device);
  place(*conv, device);
  train_contrastive(bag, corpus, device, 1500);
  train_contrastive(conv, corpus, device, 1500);

  {
    torch::NoGradGuard no_grad;
    conv->eval();
    bag->eval();
    auto probe = tokenize("a method for bonding a polymer film to a glass substrate using ultraviolet light");
    // OK(torch-device-mismatch): the probe is moved for the bag encoder.
    auto zb = bag->forward(probe.to(device));
    // BUG(torch-device-mismatch): place() moved the conv encoder to `device`;
    // the probe ids are still on the CPU.
    auto zc = conv->forward(probe);
    std::cout << "probe norms " << zb.norm().item<float>() << " " << zc.norm().item<float>() << "\n";
  }

  auto index = build_index(bag, corpus.claims, device);
  auto hits = search(bag, index, "polymer film bonded to glass with uv curing", make_search_config(), device);
  for (auto h : hits)
    std::cout << "claim " << h << "\n";
  return 0;
}
