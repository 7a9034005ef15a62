// Running top-1, the step logger and the confusion matrix.
#include "action.h"

#include <iostream>

void Top1Meter::update(const torch::Tensor &logits, const torch::Tensor &labels) {
  auto hits = logits.argmax(1).eq(labels).sum();
  // BUG(torch-host-sync-in-loop): train_epoch() (train.cpp) calls update()
  // on every micro-batch with logits on the training device; item() waits
  // for the step to finish.
  correct_ += hits.item<int64_t>();
  seen_ += labels.size(0);
}

double Top1Meter::value() const { return seen_ == 0 ? 0.0 : static_cast<double>(correct_) / seen_; }

void StepLogger::maybe_log(int64_t step, const torch::Tensor &loss) {
  if (step % every_ == 0) {
    // OK(torch-host-sync-in-loop): one step in `every_`.
    std::cout << "  step " << step << " loss " << loss.item<double>() << '\n';
  }
}

ConfusionMatrix::ConfusionMatrix() : counts_(torch::zeros({kClasses, kClasses}, torch::kLong)) {}

void ConfusionMatrix::add(const torch::Tensor &preds, const torch::Tensor &labels) {
  auto p = preds.accessor<int64_t, 1>();
  auto l = labels.accessor<int64_t, 1>();
  auto c = counts_.accessor<int64_t, 2>();
  for (int64_t i = 0; i < p.size(0); ++i)
    c[l[i]][p[i]] += 1;
}

double ConfusionMatrix::accuracy() const {
  const auto total = counts_.sum().item<int64_t>();
  return total == 0 ? 0.0 : static_cast<double>(counts_.trace().item<int64_t>()) / total;
}
