// The weighted loss, the metrics and the prediction helpers.
#include "shards.h"

namespace F = torch::nn::functional;

torch::Tensor weighted_loss(const torch::Tensor &logits, const torch::Tensor &labels, const torch::Tensor &weights) {
  auto per_row = F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().reduction(torch::kNone));
  return (per_row * weights.index_select(0, labels)).mean();
}

double batch_accuracy(const torch::Tensor &logits, const torch::Tensor &labels) {
  // BUG(torch-host-sync-in-loop): train.cpp calls this on every step with
  // logits on the training device; item() waits for the step to finish.
  return logits.argmax(1).eq(labels).to(torch::kFloat).mean().item<double>();
}

double evaluate(TabularNet &net, const ShardLoader &loader, torch::Device device) {
  net->eval();
  int64_t correct = 0, seen = 0;
  for (auto it = loader.begin(); it != loader.end(); ++it) {
    Batch b = *it;
    // OK(torch-inference-without-no-grad): train.cpp calls evaluate() only
    // inside a NoGradGuard.
    auto logits = net->forward(b.features.to(device));
    correct += logits.argmax(1).eq(b.labels.to(device)).sum().item<int64_t>();
    seen += b.labels.size(0);
  }
  net->train();
  return seen == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(seen);
}

std::vector<int64_t> predict_all(TabularNet &net, const ShardLoader &loader, torch::Device device) {
  net->eval();
  std::vector<int64_t> out;
  auto it = loader.begin();
  while (it != loader.end()) {
    Batch b = *it;
    // BUG(torch-inference-without-no-grad): main() (train.cpp) calls this
    // without a guard and nothing here runs backward.
    auto pred = net->forward(b.features.to(device)).argmax(1).cpu();
    auto acc = pred.accessor<int64_t, 1>();
    for (int64_t i = 0; i < acc.size(0); ++i) out.push_back(acc[i]);
    ++it;
  }
  return out;
}
