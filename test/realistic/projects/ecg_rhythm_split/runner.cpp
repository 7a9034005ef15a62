// Training with a logit-adjusted loss, evaluation, asynchronous prediction.
#include "ecg.h"

#include <iostream>

namespace {

// Rows are the true class, columns the predicted one.
torch::Tensor confusion_matrix(const torch::Tensor &pred, const torch::Tensor &truth) {
  return torch::bincount(truth * kClasses + pred, {}, kClasses * kClasses).view({kClasses, kClasses});
}

constexpr int64_t kEvalChunk = 512;

}  // namespace

EvalReport evaluate(RhythmNetImpl &net, const EcgSplit &split, torch::Device device) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> preds;
  const int64_t n = split.signals.size(0);
  for (int64_t s = 0; s < n; s += kEvalChunk) {
    auto x = split.signals.narrow(0, s, std::min(kEvalChunk, n - s)).to(device);
    // BUG(torch-eval-mode-missing): main.cpp evaluates the baseline fresh
    // from the registry (training mode; torch::load keeps the mode) without
    // eval(): dropout and batch statistics change the reported metrics.
    // Runner::validate() below is the correct caller.
    auto logits = net.forward(x);
    preds.push_back(logits.argmax(1));
  }
  // OK(torch-device-mismatch): the labels follow the predictions.
  auto cm = confusion_matrix(torch::cat(preds), split.labels.to(device)).to(torch::kDouble).cpu();
  auto tp = cm.diag();
  auto precision = tp / cm.sum(0).clamp_min(1.0);
  auto recall = tp / cm.sum(1).clamp_min(1.0);
  auto f1 = 2 * precision * recall / (precision + recall).clamp_min(1e-12);
  EvalReport report;
  report.accuracy = (tp.sum() / cm.sum()).item<double>();
  report.macro_f1 = f1.mean().item<double>();
  report.confusion = cm;
  return report;
}

Runner::Runner(std::shared_ptr<RhythmNetImpl> model, torch::Device device, const RunConfig &cfg)
    : model_(std::move(model)),
      device_(device),
      cfg_(cfg),
      log_prior_(class_log_prior()),
      opt_(model_->parameters(), torch::optim::AdamWOptions(cfg.lr).weight_decay(1e-2)),
      logger_(cfg.log_every) {
  model_->to(device_);
}

torch::Tensor Runner::train_step(const torch::Tensor &x, const torch::Tensor &y) {
  // BUG(torch-device-mismatch): log_prior_ comes from class_log_prior()
  // (config.cpp) on the host and is never moved; the logits are on device_.
  auto logits = model_->forward(x) + log_prior_;
  auto loss = torch::nn::functional::cross_entropy(logits, y);
  opt_.zero_grad();
  loss.backward();
  opt_.step();
  logger_.record(global_step_++, loss, logits, y);
  return loss;
}

bool Runner::plateaued() {
  if (recent_.size() < kPlateauWindow)
    return false;
  const double mean_recent =
      torch::stack(std::vector<torch::Tensor>(recent_.begin(), recent_.end())).mean().item<double>();
  const bool stalled = mean_recent > 0.995 * best_recent_;
  best_recent_ = std::min(best_recent_, mean_recent);
  return stalled;
}

void Runner::fit(const EcgSplit &train, const EcgSplit &val) {
  const int64_t n = train.signals.size(0);
  for (int64_t epoch = 0; epoch < cfg_.epochs; ++epoch) {
    model_->train();
    auto perm = torch::randperm(n);
    auto epoch_sum = torch::zeros({}, torch::TensorOptions().device(device_));
    int64_t batches = 0;
    for (int64_t s = 0; s + cfg_.batch <= n; s += cfg_.batch) {
      auto idx = perm.narrow(0, s, cfg_.batch);
      auto x = train.signals.index_select(0, idx).to(device_);
      auto y = train.labels.index_select(0, idx).to(device_);
      auto loss = train_step(x, y);
      // OK(torch-loss-accumulation-graph): detached.
      epoch_sum += loss.detach();
      // BUG(torch-loss-accumulation-graph): the plateau window keeps the
      // graphs of the last 50 steps (activations of every one) alive.
      recent_.push_back(loss);
      if (recent_.size() > kPlateauWindow)
        recent_.pop_front();
      ++batches;
    }
    if (plateaued()) {
      for (auto &group : opt_.param_groups())
        static_cast<torch::optim::AdamWOptions &>(group.options()).lr(
            static_cast<torch::optim::AdamWOptions &>(group.options()).lr() * 0.5);
    }
    const EvalReport report = validate(val);
    // OK(torch-host-sync-in-loop): once per epoch; the batch loop above is
    // the training loop.
    std::cout << "epoch " << epoch << " train loss " << (epoch_sum / static_cast<double>(batches)).item<double>()
              << " val acc " << report.accuracy << " macro-F1 " << report.macro_f1 << '\n';
    for (auto &hook : hooks_)
      hook(*model_, epoch);
  }
}

EvalReport Runner::validate(const EcgSplit &val) {
  model_->eval();
  // OK(torch-eval-mode-missing): evaluate() runs the model in eval mode here.
  EvalReport report = evaluate(*model_, val, device_);
  model_->train();
  return report;
}

torch::Tensor Runner::predict_async(const torch::Tensor &strip) {
  torch::NoGradGuard no_grad;
  model_->eval();
  auto x = strip.to(device_, /*non_blocking=*/true);
  auto probs = torch::softmax(model_->forward(x), 1);
  model_->train();
  return probs.to(torch::kCPU, /*non_blocking=*/true);
}
