// The loss, the per-batch metric and the small bookkeeping classes.
#include "layout.h"

torch::Tensor layout_loss(const torch::Tensor &logits, const torch::Tensor &labels) {
  return torch::nn::functional::cross_entropy(logits, labels);
}

double pixel_accuracy(const torch::Tensor &logits, const torch::Tensor &labels) {
  auto hits = logits.argmax(1).eq(labels).to(torch::kFloat).mean();
  // BUG(torch-host-sync-in-loop): train_epoch() (train.cpp) calls this on
  // every micro-batch with logits on the training device; item() stalls the
  // host until the step has run.
  return hits.item<double>();
}

void add_to_epoch_loss(torch::Tensor &epoch_loss, const torch::Tensor &loss) {
  // BUG(torch-loss-accumulation-graph): train_epoch() (train.cpp) passes each
  // micro-batch's loss with its graph; the epoch total keeps every one alive.
  epoch_loss += loss;
}

MicroBatchClock::MicroBatchClock(int64_t window) : window_(window) {}

bool MicroBatchClock::tick() { return ++seen_ % window_ == 0; }

void LossWindow::push(const torch::Tensor &loss) {
  // OK(torch-loss-accumulation-graph): detached before it is kept.
  values_.push_back(loss.detach());
}

double LossWindow::mean_and_reset() {
  if (values_.empty())
    return 0.0;
  // OK(torch-host-sync-in-loop): train_epoch() calls this once every
  // log_every micro-batches.
  const double mean = torch::stack(values_).mean().item<double>();
  values_.clear();
  return mean;
}
