// One fine-tuning epoch: cfg.accum micro-batches of cfg.micro_batch pages per
// optimizer step, so that the 24 GB cards and the 8 GB ones run the same
// effective batch.
#include "layout.h"

#include <iostream>

double train_epoch(LayoutNet &net, torch::optim::Optimizer &opt, const LayoutConfig &cfg, torch::Device device,
                   int64_t epoch) {
  net->train();
  MicroBatchClock clock(cfg.accum);
  LossWindow window;
  auto host_pages = page_buffer(cfg.micro_batch);
  auto epoch_loss = torch::zeros({}, torch::TensorOptions().device(device));
  double accuracy = 0.0;
  opt.zero_grad();
  for (int64_t i = 0; i < cfg.steps_per_epoch; ++i) {
    const auto seed = static_cast<uint64_t>(epoch * cfg.steps_per_epoch + i);
    auto labels = render_pages(host_pages, seed).to(device);
    // BUG(torch-non-blocking-pageable): page_buffer() (pages.cpp) allocated
    // the staging buffer in pageable memory; the copy is synchronous anyway.
    auto pages = host_pages.to(device, /*non_blocking=*/true);
    auto logits = net->forward(pages);
    auto loss = layout_loss(logits, labels);
    // BUG(torch-grad-accumulation-unscaled): layout_loss() is a mean cross
    // entropy, never divided by cfg.accum, while the step waits for the
    // clock (metrics.cpp): each update is cfg.accum mean gradients.
    loss.backward();
    if (clock.tick()) {
      // OK(torch-missing-zero-grad): step and reset under the same condition.
      opt.step();
      opt.zero_grad();
    }
    add_to_epoch_loss(epoch_loss, loss);
    window.push(loss);
    accuracy += pixel_accuracy(logits, labels);
    if ((i + 1) % cfg.log_every == 0)
      std::cout << "  epoch " << epoch << " micro-batch " << i + 1 << " loss " << window.mean_and_reset() << '\n';
  }
  const auto steps = static_cast<double>(cfg.steps_per_epoch);
  std::cout << "epoch " << epoch << " train pixel accuracy " << accuracy / steps << '\n';
  return epoch_loss.item<double>() / steps;
}
