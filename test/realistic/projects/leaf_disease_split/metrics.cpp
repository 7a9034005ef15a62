// Loss, running meters, the step logger and the field report.
#include "metrics.h"

#include <algorithm>
#include <iomanip>
#include <iostream>

LossParts loss_parts(const torch::Tensor &logits, const torch::Tensor &labels, const torch::Tensor &weights,
                     double gamma, double smoothing) {
  auto logp = torch::log_softmax(logits, 1);
  auto onehot = torch::one_hot(labels, kClasses).to(logits.dtype());
  auto pt = (logp.exp() * onehot).sum(1);
  // The miss cost of each sample's true class scales its focal term.
  auto w = weights.view({1, kClasses});
  auto focal = -((w * onehot * logp).sum(1) * (1 - pt).pow(gamma)).mean();
  auto smooth = -logp.mean(1).mean();
  return {(1 - smoothing) * focal + smoothing * smooth, focal, smooth};
}

RunningLoss::RunningLoss(torch::Device device) : sum_(torch::zeros({}, torch::TensorOptions().device(device))) {}

void RunningLoss::add(const torch::Tensor &loss, int64_t n) {
  // BUG(torch-loss-accumulation-graph): train_epoch() (train.cpp) adds each
  // step's training loss into the meter it keeps for the whole epoch; the
  // sum holds every step's graph until the epoch ends.
  sum_ += loss * static_cast<double>(n);
  count_ += n;
}

torch::Tensor RunningLoss::mean() const { return sum_ / static_cast<double>(std::max<int64_t>(count_, 1)); }

void StepLogger::record(int64_t step, const torch::Tensor &loss, const torch::Tensor &logits,
                        const torch::Tensor &labels) {
  // BUG(torch-host-sync-in-loop): train_epoch() (train.cpp) records every
  // training step, and the loss it hands over is on the device.
  const double value = loss.item<double>();
  smoothed_ = smoothed_ < 0 ? value : 0.98 * smoothed_ + 0.02 * value;
  if (step % every_ == 0) {
    // OK(torch-host-sync-in-loop): one step in every_.
    const double acc = (logits.argmax(1) == labels).to(torch::kFloat).mean().item<double>();
    std::cout << "step " << std::setw(5) << step << "  loss " << std::fixed << std::setprecision(4)
              << smoothed_ << "  batch acc " << acc << '\n';
  }
}

void field_report(LeafNet &net, LeafNet &ema, const LeafBatch &field, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto x = field.images.to(device);
  // OK(torch-eval-mode-missing, torch-inference-without-no-grad): main()
  // (train.cpp) froze the live network with freeze() (model.cpp), and the
  // guard is above.
  auto live = net->forward(x).argmax(1);
  // BUG(torch-eval-mode-missing): the EMA copy comes from make_leafnet()
  // (model.cpp) in training mode, and ema_update() only ever touches its
  // weights; dropout and batch statistics are on for the shipped weights.
  auto shipped = ema->forward(x).argmax(1);
  // OK(torch-device-mismatch): both predictions are on the device.
  const double agree = (live == shipped).to(torch::kFloat).mean().item<double>();
  // BUG(torch-device-mismatch): the photos' labels were never moved to the
  // device the predictions are on.
  auto hit = (shipped == field.labels).to(torch::kFloat);
  std::cout << "field photos: " << field.labels.size(0) << "  accuracy " << hit.mean().item<double>()
            << "  agreement with live net " << agree << '\n';
}
