// Training, evaluation and tiled prediction of the detector.
#include "detector.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <iostream>
#include <string>

void train_detector(Detector &det, torch::optim::Optimizer &opt, torch::Device device,
                    const TrainConfig &cfg, EpochLog &log) {
  det->train();
  auto staging = make_staging(cfg.batch);
  LossMeter meter;
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    meter.reset();
    for (int64_t step = 0; step < cfg.steps_per_epoch; ++step) {
      fill_synthetic(staging, epoch * 100000 + step);
      // BUG(torch-non-blocking-pageable): make_staging() (data.cpp) allocates
      // pageable buffers; upload() asks for a non-blocking copy of them.
      auto images = upload(staging.images, device);
      auto labels = staging.labels.to(device);
      auto boxes = staging.boxes.to(device);

      clear_grads(opt);
      auto out = det->forward(images);
      auto loss = torch::nn::functional::cross_entropy(out.narrow(1, 0, kClasses), labels) +
                  torch::nn::functional::smooth_l1_loss(out.narrow(1, kClasses, 4), boxes);
      loss.backward();
      // OK(torch-missing-zero-grad): clear_grads() (engine.cpp) zeroes the
      // optimizer before every backward.
      opt.step();
      meter.update(loss);
      log.record(loss);
    }
    compact_allocator();
    std::cout << "epoch " << epoch << " loss " << meter.mean() << '\n';
  }
}

double evaluate_accuracy(Detector &det, torch::Device device, int64_t batches) {
  auto staging = make_pinned_staging(64);
  auto anchors = make_anchors(64);
  int64_t correct = 0, seen = 0;
  double centre_error = 0;
  for (int64_t b = 0; b < batches; ++b) {
    fill_synthetic(staging, 900000 + b);
    // OK(torch-non-blocking-pageable): make_pinned_staging() (data.cpp)
    // allocates page-locked buffers.
    auto images = upload(staging.images, device);
    // BUG(torch-eval-mode-missing): main.cpp evaluates right after
    // train_detector() left the model in training mode (dropout, batch norm).
    auto out = det->forward(images);
    correct += out.narrow(1, 0, kClasses).argmax(1).eq(staging.labels.to(device)).sum().item<int64_t>();
    // BUG(torch-device-mismatch): make_anchors() (data.cpp) returns host
    // offsets; the regression output is on the model's device.
    auto decoded = out.narrow(1, kClasses, 4) + anchors;
    centre_error += (decoded.narrow(1, 0, 2) - staging.boxes.narrow(1, 0, 2).to(device)).abs().mean().item<double>();
    seen += out.size(0);
  }
  std::cout << "centre error " << centre_error / static_cast<double>(batches) << '\n';
  return static_cast<double>(correct) / static_cast<double>(seen);
}

// Runs the whole tile set at once; on out-of-memory, frees the cache and
// tries again.
torch::Tensor predict_tiles(Detector &det, const torch::Tensor &tiles) {
  try {
    return run_detector(det, tiles);
  } catch (const c10::Error &e) {
    if (std::string(e.what()).find("out of memory") == std::string::npos)
      throw;
    // BUG(torch-empty-cache-oom-retry): run_detector() is retried on the same
    // tiles at the same size.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return run_detector(det, tiles);
  }
}
