// Training with per-step EMA updates, periodic validation on the holdout,
// and the field report of the weights that ship.
#include "metrics.h"

#include <iostream>

namespace {

struct EpochStats {
  torch::Tensor loss;   // sample-weighted mean training loss
  torch::Tensor focal;  // mean focal term
};

EpochStats train_epoch(LeafNet &net, LeafNet &ema, torch::optim::Optimizer &opt, LeafSource &source,
                       const torch::Tensor &weights, StepLogger &logger, const TrainConfig &cfg, int64_t epoch,
                       torch::Device device) {
  net->train();
  RunningLoss meter(device);
  std::vector<torch::Tensor> focal_terms;
  for (int64_t s = 0; s < cfg.steps_per_epoch; ++s) {
    LeafBatch batch = source.next();
    // OK(torch-non-blocking-pageable): fit() renders the training images
    // into page-locked memory on GPU runs.
    auto x = upload(batch.images, device);
    // BUG(torch-non-blocking-pageable): the labels from LeafSource::next()
    // (data.cpp) are a plain randint, pageable; upload() copies them with
    // non_blocking.
    auto y = upload(batch.labels, device);
    auto logits = net->forward(x);
    // BUG(torch-device-mismatch): the class weights from class_weights()
    // (data.cpp) stay on the host, and loss_parts() (metrics.cpp) multiplies
    // them with the one-hot labels on the device.
    auto parts = loss_parts(logits, y, weights);
    opt.zero_grad();
    parts.total.backward();
    opt.step();
    ema_update(ema, net, cfg.ema_decay);
    meter.add(parts.total, y.size(0));
    // BUG(torch-loss-accumulation-graph): the focal term from loss_parts()
    // (metrics.cpp) is part of the step's graph; the vector keeps every
    // step's graph for the whole epoch.
    focal_terms.push_back(parts.focal);
    logger.record(epoch * cfg.steps_per_epoch + s, parts.total, logits, y);
  }
  return {meter.mean(), torch::stack(focal_terms).mean()};
}

double validate(LeafNet &net, const std::vector<LeafBatch> &holdout, const torch::Tensor &weights,
                torch::Device device) {
  torch::NoGradGuard no_grad;
  RunningLoss meter(device);
  auto correct = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(device));
  int64_t seen = 0;
  for (const auto &chunk : holdout) {
    // BUG(torch-non-blocking-pageable): holdout_chunks() (data.cpp) renders
    // the holdout with pin = false, into pageable memory.
    auto x = upload(chunk.images, device);
    auto y = chunk.labels.to(device);
    // BUG(torch-eval-mode-missing): fit() validates right after
    // train_epoch(), which put the network in training mode; nothing calls
    // eval(), so dropout and batch statistics are on during validation.
    auto logits = net->forward(x);
    // OK(torch-device-mismatch): fit() hands over the weights on the device.
    meter.add(loss_parts(logits, y, weights).total, y.size(0));
    // OK(torch-loss-accumulation-graph): a count of hits carries no graph.
    correct += (logits.argmax(1) == y).sum();
    seen += y.size(0);
  }
  const double acc = correct.item<double>() / static_cast<double>(seen);
  std::cout << "  holdout loss " << meter.mean().item<double>() << "  accuracy " << acc << '\n';
  return acc;
}

void fit(LeafNet &net, LeafNet &ema, const TrainConfig &cfg, torch::Device device) {
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(cfg.lr).weight_decay(1e-4));
  LeafSource source(/*seed=*/7, cfg.batch, /*pin=*/device.is_cuda());
  const auto holdout = holdout_chunks(/*chunks=*/6, /*seed=*/2024);
  const auto weights = class_weights();
  StepLogger logger(cfg.log_every);
  double best = 0.0;
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    auto stats = train_epoch(net, ema, opt, source, weights, logger, cfg, epoch, device);
    if ((epoch + 1) % cfg.val_every == 0) {
      // OK(torch-host-sync-in-loop): only on validation epochs.
      std::cout << "epoch " << epoch + 1 << "  train loss " << stats.loss.item<double>() << "  focal "
                << stats.focal.item<double>() << '\n';
      const double acc = validate(net, holdout, weights.to(device), device);
      if (acc > best) {
        best = acc;
        torch::save(ema, cfg.out);
      }
    }
  }
  std::cout << "best holdout accuracy " << best << '\n';
}

}  // namespace

int main(int argc, char **argv) {
  TrainConfig cfg;
  if (argc > 1)
    cfg.epochs = std::stoll(argv[1]);
  torch::manual_seed(3);
  // OK(torch-cuda-unguarded): a CPU fallback on the other side.
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  LeafNet net = make_leafnet(cfg, device);
  LeafNet ema = make_leafnet(cfg, device);
  ema_update(ema, net, /*decay=*/0.0);  // start from the same weights
  fit(net, ema, cfg, device);
  freeze(net);
  field_report(net, ema, field_photos(/*seed=*/99), device);
  return 0;
}
