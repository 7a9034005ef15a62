// Named-entity tagging for commercial contracts: parties, dates, amounts and
// governing law are tagged token by token (BIO, nine tags) by a convolutional
// tagger. The head is warmed up alone with SGD, then the whole network trains
// with AdamW: the trainer swaps its two optimizers. Once trained, the tagger
// moves to a spare GPU when the node has one and tags the contract archive.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace lexner {

constexpr int64_t kVocab = 6000, kTags = 9, kPad = 0, kIgnore = -100, kMaxLen = 96;

// Token ids and tags of a batch of clauses, as the tokenizer hands them over.
struct EncodedBatch {
  torch::Tensor ids;      // [B, T] int64
  torch::Tensor tags;     // [B, T], kIgnore on padding
  torch::Tensor lengths;  // [B], stays on the host

  static EncodedBatch from_tokens(const std::vector<std::vector<int64_t>> &docs,
                                  const std::vector<std::vector<int64_t>> &labels) {
    const auto b = static_cast<int64_t>(docs.size());
    std::vector<int64_t> ids(static_cast<size_t>(b * kMaxLen), kPad), tags(ids.size(), kIgnore), lens;
    for (size_t i = 0; i < docs.size(); ++i) {
      for (size_t t = 0; t < docs[i].size() && t < static_cast<size_t>(kMaxLen); ++t) {
        ids[i * kMaxLen + t] = docs[i][t];
        tags[i * kMaxLen + t] = labels[i][t];
      }
      lens.push_back(static_cast<int64_t>(std::min(docs[i].size(), static_cast<size_t>(kMaxLen))));
    }
    return {torch::tensor(ids).view({b, kMaxLen}), torch::tensor(tags).view({b, kMaxLen}), torch::tensor(lens)};
  }
};

// Clauses where a capitalised run after "between" is a party, and so on.
EncodedBatch synth_clauses(std::mt19937 &rng, int64_t n) {
  std::uniform_int_distribution<int64_t> word(10, kVocab - 1), len(24, kMaxLen), tag(0, kTags - 1);
  std::vector<std::vector<int64_t>> docs, labels;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> d, l;
    for (int64_t t = 0, L = len(rng); t < L; ++t) {
      d.push_back(word(rng));
      l.push_back(d.back() % 7 == 0 ? tag(rng) : 0);
    }
    docs.push_back(d), labels.push_back(l);
  }
  return EncodedBatch::from_tokens(docs, labels);
}

struct ClauseTaggerImpl : nn::Module {
  ClauseTaggerImpl()
      : embed(register_module("embed", nn::Embedding(kVocab, 96))),
        conv(register_module("conv", nn::Conv1d(nn::Conv1dOptions(96, 128, 3).padding(1)))),
        norm(register_module("norm", nn::LayerNorm(nn::LayerNormOptions({128})))),
        drop(register_module("drop", nn::Dropout(0.3))),
        out(register_module("out", nn::Linear(128, kTags))) {}
  // [B, T] ids -> [B, T, tags] logits
  torch::Tensor forward(const torch::Tensor &ids) {
    auto h = conv->forward(embed->forward(ids).transpose(1, 2)).transpose(1, 2);
    return out->forward(drop->forward(torch::gelu(norm->forward(h))));
  }
  nn::Embedding embed;
  nn::Conv1d conv;
  nn::LayerNorm norm;
  nn::Dropout drop;
  nn::Linear out;
};
TORCH_MODULE(ClauseTagger);

struct DeviceBatch {
  torch::Tensor ids, tags, lengths;
};

class ContractLoader {
 public:
  ContractLoader(int64_t batches, int64_t batch_size, torch::Device device, uint32_t seed) : device_(device) {
    std::mt19937 rng(seed);
    for (int64_t i = 0; i < batches; ++i)
      host_.push_back(synth_clauses(rng, batch_size));
  }
  size_t size() const { return host_.size(); }
  DeviceBatch fetch(size_t i) const {
    const EncodedBatch &h = host_[i];
    // BUG(torch-non-blocking-pageable): the ids come from from_tokens()'
    // torch::tensor of a std::vector: pageable, so the copy is synchronous.
    return {h.ids.to(device_, /*non_blocking=*/true), h.tags.to(device_), h.lengths};
  }

 private:
  torch::Device device_;
  std::vector<EncodedBatch> host_;
};

// Entity-level counts on the device; tags > 0 are entity tags.
struct EntityF1 {
  explicit EntityF1(const torch::Device &device)
      : tp(torch::zeros({}, device)), fp(torch::zeros({}, device)), fn(torch::zeros({}, device)) {}
  void update(const torch::Tensor &pred, const torch::Tensor &gold) {
    auto valid = gold != kIgnore;
    // OK(torch-loss-accumulation-graph): sums of comparisons carry no graph.
    tp += ((pred == gold) & (gold > 0) & valid).sum();
    fp += ((pred != gold) & (pred > 0) & valid).sum();
    fn += ((pred != gold) & (gold > 0)).sum();
  }
  double value() const { return (2 * tp / (2 * tp + fp + fn).clamp_min(1)).item<double>(); }
  torch::Tensor tp, fp, fn;
};

template <typename Metric>
double evaluate(ClauseTagger &net, const ContractLoader &data, Metric metric) {
  net->eval();
  for (size_t i = 0; i < data.size(); ++i) {
    auto b = data.fetch(i);
    // BUG(torch-inference-without-no-grad): a pure evaluation loop without a
    // NoGradGuard: autograd records every batch's activations.
    auto pred = net->forward(b.ids).argmax(-1);
    metric.update(pred, b.tags);
  }
  net->train();
  return metric.value();
}

}  // namespace lexner

using lexner::ClauseTagger;

class NerTrainer {
 public:
  using StepHook = std::function<void(int64_t, const torch::Tensor &)>;

  NerTrainer(ClauseTagger net, StepHook hook)
      : net_(std::move(net)), on_step_(std::move(hook)),
        active_(std::make_unique<torch::optim::SGD>(net_->out->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9))),
        standby_(std::make_unique<torch::optim::AdamW>(net_->parameters(), torch::optim::AdamWOptions(3e-4))) {}

  // After the warm-up the full AdamW takes over from the head-only SGD.
  void unfreeze() { std::swap(active_, standby_); }

  int64_t train_epoch(const lexner::ContractLoader &loader) {
    net_->train();
    int64_t tokens = 0;
    for (size_t i = 0; i < loader.size(); ++i) {
      auto b = loader.fetch(i);
      active_->zero_grad();
      // OK(torch-eval-mode-missing): train() at the top of the epoch.
      auto logits = net_->forward(b.ids);
      auto loss = F::cross_entropy(logits.flatten(0, 1), b.tags.flatten(),
                                   F::CrossEntropyFuncOptions().ignore_index(lexner::kIgnore));
      loss.backward();
      // OK(torch-missing-zero-grad): whichever optimizer is active was reset before this backward.
      active_->step();
      // OK(torch-host-sync-in-loop): the lengths never leave the host.
      tokens += b.lengths.sum().item<int64_t>();
      on_step_(++step_, loss);
    }
    return tokens;
  }

 private:
  ClauseTagger net_;
  StepHook on_step_;
  std::unique_ptr<torch::optim::Optimizer> active_, standby_;
  int64_t step_ = 0;
};

bool has_spare_gpu() { return torch::cuda::is_available() && torch::cuda::device_count() > 1; }

torch::Device scoring_device() {
  if (has_spare_gpu())
    // OK(torch-device-index-unchecked, torch-cuda-unguarded): has_spare_gpu() compared device_count() with 1.
    return torch::Device("cuda:1");
  return torch::Device(torch::kCPU);
}

std::vector<int64_t> tag_all(ClauseTagger &net, const std::vector<lexner::EncodedBatch> &docs,
                             const torch::Device &dev, int64_t chunk) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> entities;
  for (const auto &d : docs) {
    for (int64_t s = 0; s < d.ids.size(0); s += chunk) {
      auto ids = d.ids.slice(0, s, s + chunk);
      torch::Tensor on_dev = ids;
      if (dev.is_cuda()) {
        auto pinned = ids.pin_memory();
        // OK(torch-non-blocking-pageable): the slice was pinned just above.
        on_dev = pinned.to(dev, /*non_blocking=*/true);
      }
      // OK(torch-device-mismatch, torch-eval-mode-missing, torch-inference-without-no-grad): on_dev is on `dev`
      // or `dev` is the CPU; tag_archive() called eval(); no-grad above.
      auto tags = net->forward(on_dev).argmax(-1);
      auto host = tags.to(torch::kCPU, /*non_blocking=*/true);
      if (dev.is_cuda())
        torch::cuda::synchronize();
      // OK(torch-non-blocking-d2h-race): the device was synchronised after the copy.
      entities.push_back((host > 0).sum().item<int64_t>());
    }
  }
  return entities;
}

std::vector<int64_t> tag_archive(ClauseTagger &net, const std::vector<lexner::EncodedBatch> &docs,
                                 const torch::Device &dev) {
  net->eval();
  try {
    return tag_all(net, docs, dev, 64);
  } catch (const c10::OutOfMemoryError &) {
    // OK(torch-empty-cache-oom-retry, torch-empty-cache-in-loop): once, outside any loop, and the retry runs at a
    // quarter of the chunk.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return tag_all(net, docs, dev, 16);
  }
}

int main() {
  torch::manual_seed(313);
  // OK(torch-cuda-unguarded): CUDA only when is_available() says so.
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  lexner::ContractLoader train(120, 32, device, 1), val(10, 64, device, 2);

  ClauseTagger net;
  // OK(torch-tensor-to-discarded): Module::to moves the module in place.
  net->to(device);
  double smoothed = 0.0;
  NerTrainer trainer(net, [&smoothed](int64_t step, const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): the progress bar reads the CUDA loss on
    // every step through the trainer's hook.
    smoothed = 0.98 * smoothed + 0.02 * loss.item<double>();
    if (step % 100 == 0)
      std::cout << "  step " << step << " loss " << smoothed << '\n';
  });
  for (int epoch = 0; epoch < 4; ++epoch) {
    if (epoch == 1)
      trainer.unfreeze();
    const int64_t tokens = trainer.train_epoch(train);
    std::cout << "epoch " << epoch << " tokens " << tokens << " entity F1 "
              << lexner::evaluate(net, val, lexner::EntityF1(device)) << '\n';
  }

  const torch::Device score_dev = scoring_device();
  net->to(score_dev);
  std::mt19937 rng(3);
  std::vector<lexner::EncodedBatch> archive;
  for (int i = 0; i < 20; ++i)
    archive.push_back(lexner::synth_clauses(rng, 128));
  auto counts = tag_archive(net, archive, score_dev);
  std::cout << "archive entity tokens: " << std::accumulate(counts.begin(), counts.end(), int64_t{0}) << '\n';
}
