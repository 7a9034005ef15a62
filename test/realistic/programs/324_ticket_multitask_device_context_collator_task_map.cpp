// Support-ticket triage: one convolutional sentence encoder shared by three
// heads (intent, urgency, product line), trained jointly on tokenised tickets.
// The device is decided once by a process-wide DeviceContext; a data collator
// pads the token lists into a Batch that callers move with Batch::to().
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace triage {

constexpr int64_t kVocab = 8000, kPad = 0, kMaxLen = 64;

class DeviceContext {
 public:
  static DeviceContext &instance() {
    static DeviceContext ctx;
    return ctx;
  }
  const torch::Device &device() const { return device_; }

 private:
  // OK(torch-cuda-unguarded): CUDA only when is_available() says so.
  DeviceContext() : device_(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU) {}
  torch::Device device_;
};

struct Sample {
  std::vector<int64_t> tokens;
  int64_t intent, urgency, product;
};

struct Batch {
  torch::Tensor ids, mask;
  std::unordered_map<std::string, torch::Tensor> labels;

  Batch to(const torch::Device &d) const {
    Batch out{ids.to(d), mask.to(d), {}};
    for (const auto &kv : labels)
      out.labels.emplace(kv.first, kv.second.to(d));
    return out;
  }
};

// Pads to the longest ticket of the shard (sorted longest first, for packing).
Batch collate(std::vector<Sample> &samples) {
  std::sort(samples.begin(), samples.end(),
            [](const Sample &a, const Sample &b) { return a.tokens.size() > b.tokens.size(); });
  const auto b = static_cast<int64_t>(samples.size());
  const auto t = std::min<int64_t>(kMaxLen, static_cast<int64_t>(samples.front().tokens.size()));
  auto ids = torch::full({b, t}, kPad, torch::kLong);
  auto acc = ids.accessor<int64_t, 2>();
  std::vector<int64_t> intent, urgency, product;
  for (int64_t i = 0; i < b; ++i) {
    const auto &s = samples[static_cast<size_t>(i)];
    for (int64_t j = 0; j < t && j < static_cast<int64_t>(s.tokens.size()); ++j)
      acc[i][j] = s.tokens[static_cast<size_t>(j)];
    intent.push_back(s.intent), urgency.push_back(s.urgency), product.push_back(s.product);
  }
  Batch out{ids, ids != kPad, {}};
  out.labels["intent"] = torch::tensor(intent);
  out.labels["urgency"] = torch::tensor(urgency);
  out.labels["product"] = torch::tensor(product);
  return out;
}

struct TriageNetImpl : nn::Module {
  TriageNetImpl()
      : embed(register_module("embed", nn::Embedding(nn::EmbeddingOptions(kVocab, 128).padding_idx(kPad)))),
        conv(register_module("conv", nn::Conv1d(nn::Conv1dOptions(128, 192, 5).padding(2)))),
        drop(register_module("drop", nn::Dropout(0.25))),
        intent(register_module("intent", nn::Linear(192, 12))),
        urgency(register_module("urgency", nn::Linear(192, 4))),
        product(register_module("product", nn::Linear(192, 7))) {}

  std::unordered_map<std::string, torch::Tensor> forward(const torch::Tensor &ids, const torch::Tensor &mask) {
    auto h = torch::relu(conv->forward(embed->forward(ids).transpose(1, 2))).transpose(1, 2);
    auto m = mask.unsqueeze(-1).to(h.dtype());
    auto pooled = drop->forward((h * m).sum(1) / m.sum(1).clamp_min(1.0));
    return {{"intent", intent->forward(pooled)}, {"urgency", urgency->forward(pooled)},
            {"product", product->forward(pooled)}};
  }
  nn::Embedding embed;
  nn::Conv1d conv;
  nn::Dropout drop;
  nn::Linear intent, urgency, product;
};
TORCH_MODULE(TriageNet);

// Top-1 accuracy of one head over the epoch.
class HeadAccuracy {
 public:
  void observe(const torch::Tensor &logits, const torch::Tensor &labels) {
    // BUG(torch-host-sync-in-loop): fit_epoch() calls this on every step with
    // the urgency logits on the context's device: .item() stalls each step.
    hits_ += (logits.argmax(1) == labels).sum().item<int64_t>();
    seen_ += labels.size(0);
  }
  double value() const { return seen_ ? static_cast<double>(hits_) / static_cast<double>(seen_) : 0.0; }

 private:
  int64_t hits_ = 0, seen_ = 0;
};

// Running mean of the weighted loss; the trainer resets it every epoch.
class LossMeter {
 public:
  void reset(const torch::Device &d) { sum_ = torch::zeros({}, d), count_ = 0; }
  torch::Tensor &sum() { return sum_; }
  int64_t &count() { return count_; }
  double mean() const { return count_ ? sum_.item<double>() / static_cast<double>(count_) : 0.0; }

 private:
  torch::Tensor sum_;
  int64_t count_ = 0;
};

class MultiTaskTrainer {
 public:
  explicit MultiTaskTrainer(TriageNet net)
      : net_(net), task_weights_(torch::tensor({1.0f, 0.5f, 0.5f})),
        opt_(net_->parameters(), torch::optim::AdamWOptions(2e-4).weight_decay(0.01)) {}

  std::unordered_map<std::string, double> fit_epoch(std::vector<std::vector<Sample>> &shards) {
    const torch::Device &device = DeviceContext::instance().device();
    const std::vector<std::string> tasks = {"intent", "urgency", "product"};
    net_->train();
    meter_.reset(device);
    std::unordered_map<std::string, torch::Tensor> task_loss;
    for (const auto &name : tasks)
      task_loss[name] = torch::zeros({}, device);
    for (auto &shard : shards) {
      Batch b = collate(shard).to(device);
      for (auto &p : net_->parameters())
        if (p.mutable_grad().defined())
          p.mutable_grad().zero_();
      // OK(torch-device-mismatch, torch-eval-mode-missing): the batch was moved with Batch::to(); train() above.
      auto logits = net_->forward(b.ids, b.mask);
      std::vector<torch::Tensor> per_task;
      for (const auto &name : tasks) {
        auto l = F::cross_entropy(logits.at(name), b.labels.at(name));
        // OK(torch-loss-accumulation-graph): per_task is rebuilt every step and
        // backward() runs through torch::stack(per_task) below.
        per_task.push_back(l);
        // BUG(torch-loss-accumulation-graph): the map by task name lives for
        // the whole epoch and keeps every step's graph through its elements.
        task_loss[name] += l;
      }
      // BUG(torch-device-mismatch): task_weights_ was built on the CPU in the
      // constructor; the stacked losses are on the context's device.
      auto total = (torch::stack(per_task) * task_weights_).sum();
      total.backward();
      // OK(torch-missing-zero-grad): the loop over the parameters above resets every gradient.
      opt_.step();
      urgency_acc_.observe(logits.at("urgency"), b.labels.at("urgency"));
      // BUG(torch-loss-accumulation-graph): sum() hands out the member by
      // reference; the epoch's running total keeps every step's graph.
      meter_.sum() += total;
      ++meter_.count();
    }
    std::unordered_map<std::string, double> out;
    for (const auto &kv : task_loss)
      out[kv.first] = kv.second.item<double>() / static_cast<double>(shards.size());
    return out;
  }
  double urgency_accuracy() const { return urgency_acc_.value(); }
  double mean_loss() const { return meter_.mean(); }

 private:
  TriageNet net_;
  torch::Tensor task_weights_;
  torch::optim::AdamW opt_;
  HeadAccuracy urgency_acc_;
  LossMeter meter_;
};

double evaluate_intent(TriageNet &net, std::vector<std::vector<Sample>> &shards) {
  torch::NoGradGuard no_grad;
  net->eval();
  int64_t hits = 0, seen = 0;
  for (auto &shard : shards) {
    Batch b = collate(shard);
    // The validation batch is never moved with Batch::to() (flagged at the
    // call in main(), where the network's device is known).
    auto logits = net->forward(b.ids, b.mask);
    hits += (logits.at("intent").argmax(1) == b.labels.at("intent")).sum().item<int64_t>();
    seen += b.ids.size(0);
  }
  net->train();
  return static_cast<double>(hits) / static_cast<double>(std::max<int64_t>(seen, 1));
}

std::vector<std::vector<Sample>> synth_tickets(std::mt19937 &rng, int shards, int per_shard) {
  std::uniform_int_distribution<int64_t> word(1, kVocab - 1), len(6, 80), intent(0, 11), urg(0, 3), prod(0, 6);
  std::vector<std::vector<Sample>> out(static_cast<size_t>(shards));
  for (auto &shard : out)
    for (int i = 0; i < per_shard; ++i) {
      Sample s{{}, intent(rng), urg(rng), prod(rng)};
      for (int64_t j = 0, n = len(rng); j < n; ++j)
        s.tokens.push_back(word(rng));
      shard.push_back(std::move(s));
    }
  return out;
}

}  // namespace triage

int main() {
  torch::manual_seed(324);
  std::mt19937 rng(324);
  auto train = triage::synth_tickets(rng, 80, 32);
  auto val = triage::synth_tickets(rng, 8, 64);

  triage::TriageNet net;
  net->to(triage::DeviceContext::instance().device());
  triage::MultiTaskTrainer trainer(net);
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto losses = trainer.fit_epoch(train);
    // BUG(torch-device-mismatch): evaluate_intent() feeds the CPU batch of
    // collate() to the network, which main() put on the context's device.
    std::cout << "epoch " << epoch << " intent " << losses["intent"] << " urgency " << losses["urgency"]
              << " product " << losses["product"] << " mean " << trainer.mean_loss()
              << " urgency acc " << trainer.urgency_accuracy()
              << " val intent acc " << triage::evaluate_intent(net, val) << '\n';
  }
}
