// The linear-probe warm-up of the new head and the fine-tuning epochs.
#include "action.h"

#include <iostream>

namespace F = torch::nn::functional;

// A few hundred clips through the frozen backbone teach the fresh head the
// site's classes before the whole network is unfrozen.
void warmup_head(R2Plus1D &net, const FinetuneConfig &cfg, torch::Device device) {
  set_backbone_trainable(net, false);
  net->train();
  torch::optim::SGD head_opt(net->head->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  ClipSource source(cfg.batch, /*seed=*/10000);
  for (int64_t step = 0; step < cfg.warmup_steps; ++step) {
    ClipBatch batch = source.next();
    auto logits = net->forward(batch.frames.to(device));
    auto loss = F::cross_entropy(logits, batch.labels.to(device));
    loss.backward();
    // BUG(torch-missing-zero-grad): nothing resets the head's gradients, so
    // each step applies the sum of all the warm-up gradients so far.
    head_opt.step();
  }
}

// One epoch of fine-tuning with `cfg.accum` micro-batches per update; returns
// the mean micro-batch loss.
double train_epoch(R2Plus1D &net, torch::optim::Optimizer &opt, ClipSource &source, const FinetuneConfig &cfg,
                   torch::Device device, int64_t epoch) {
  net->train();
  Top1Meter meter;
  StepLogger logger(cfg.log_every);
  auto epoch_loss = torch::zeros({}, torch::TensorOptions().device(device));
  opt.zero_grad();
  for (int64_t step = 0; step < cfg.steps_per_epoch; ++step) {
    torch::Tensor x, y;
    if (device.is_cuda()) {
      ClipBatch pinned = source.next_pinned();
      // OK(torch-non-blocking-pageable): next_pinned() (clips.cpp) returns
      // page-locked tensors.
      x = pinned.frames.to(device, /*non_blocking=*/true);
      y = pinned.labels.to(device, /*non_blocking=*/true);
    } else {
      ClipBatch host = source.next();
      x = host.frames.to(device);
      y = host.labels.to(device);
    }
    auto logits = net->forward(x);
    auto loss = F::cross_entropy(logits, y);
    // BUG(torch-grad-accumulation-unscaled): the mean loss of each
    // micro-batch is never divided by cfg.accum, so every update is four
    // times the mean gradient.
    loss.backward();
    if ((step + 1) % cfg.accum == 0) {
      // OK(torch-missing-zero-grad): step and reset under the same condition.
      opt.step();
      opt.zero_grad();
    }
    meter.update(logits, y);
    // BUG(torch-loss-accumulation-graph): epoch_loss outlives the step and
    // keeps every micro-batch's graph alive.
    epoch_loss += loss;
    logger.maybe_log(step, loss);
  }
  std::cout << "epoch " << epoch << " train top-1 " << meter.value() << '\n';
  return epoch_loss.item<double>() / static_cast<double>(cfg.steps_per_epoch);
}
