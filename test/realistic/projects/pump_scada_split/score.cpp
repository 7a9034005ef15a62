// Threshold calibration and scoring.
#include "scada.h"

#include <cmath>

bool loss_diverged(const torch::Tensor &loss) {
  // BUG(torch-host-sync-in-loop): Trainer::fit() (model.cpp) asks this on
  // every step, with the loss still on the training device.
  const double value = loss.item<double>();
  return !std::isfinite(value) || value > 1e3;
}

// The alarm threshold is a high quantile of the reconstruction error on
// commissioning data.
double calibrate_threshold(PumpAutoencoder net, double quantile) {
  torch::NoGradGuard no_grad;
  auto reference = healthy_reference(2048, /*seed=*/17);
  auto x = reference.to(Env::device());
  // BUG(torch-eval-mode-missing): main.cpp calibrates with the handle that
  // Trainer::fit() (model.cpp) left in training mode, and only calls eval()
  // afterwards; dropout and batch statistics are live here.
  auto recon = net->forward(x);
  // BUG(torch-device-mismatch): compares with the host copy from
  // healthy_reference() (data.cpp) instead of x; recon is on Env::device().
  auto err = (recon - reference).pow(2).mean({1, 2});
  return torch::quantile(err, quantile).item<double>();
}

AnomalyReport score_windows(PumpAutoencoder net, const WindowBatch &batch, double threshold) {
  torch::NoGradGuard no_grad;
  auto x = batch.values.to(Env::device());
  // OK(torch-eval-mode-missing): main.cpp calls eval() on this handle before
  // scoring.
  auto recon = net->forward(x);
  auto err = (recon - x).pow(2).mean({1, 2});
  // OK(torch-device-mismatch): the limit is made on err's device.
  auto limit = torch::full_like(err, threshold);
  AnomalyReport report;
  report.errors = err.to(torch::kCPU, /*non_blocking=*/true);
  report.alarms = (err > limit).to(torch::kCPU, /*non_blocking=*/true);
  return report;
}
