// Loss, meters and reports of the leaf classifier (metrics.cpp).
#pragma once

#include "leaf.h"

struct LossParts {
  torch::Tensor total;   // what backward() runs on
  torch::Tensor focal;   // the cost-weighted focal term
  torch::Tensor smooth;  // the label-smoothing term
};

// Cost-weighted focal loss with label smoothing: logits [B, C], labels [B],
// weights [C].
LossParts loss_parts(const torch::Tensor &logits, const torch::Tensor &labels, const torch::Tensor &weights,
                     double gamma = 2.0, double smoothing = 0.05);

// Sample-weighted mean of per-batch losses, kept on the device.
class RunningLoss {
 public:
  explicit RunningLoss(torch::Device device);
  void add(const torch::Tensor &loss, int64_t n);
  torch::Tensor mean() const;

 private:
  torch::Tensor sum_;
  int64_t count_ = 0;
};

// Smoothed training loss, printed with the batch accuracy every few steps.
class StepLogger {
 public:
  explicit StepLogger(int64_t every) : every_(every) {}
  void record(int64_t step, const torch::Tensor &loss, const torch::Tensor &logits, const torch::Tensor &labels);
  double smoothed() const { return smoothed_; }

 private:
  int64_t every_;
  double smoothed_ = -1.0;
};

// Accuracy of the shipped (EMA) weights on growers' own photos, and how
// often they agree with the live network.
void field_report(LeafNet &net, LeafNet &ema, const LeafBatch &field, torch::Device device);
