// Batches and metrics of the split trainer.
#include "trainer.h"

torch::Device select_device() {
  if (torch::cuda::is_available())
    return torch::Device(torch::kCUDA);
  return torch::Device(torch::kCPU);
}

Batch make_batch(int64_t n, int64_t features, int64_t classes) {
  auto x = torch::randn({n, features});
  auto y = (x.narrow(1, 0, 1).squeeze(1) > 0).to(torch::kLong) % classes;
  return {x, y};
}

void log_step(Meter &meter, const torch::Tensor &loss) {
  // BUG(torch-host-sync-in-loop): Trainer::fit() (trainer.cpp) calls this on
  // every training step with a loss on the trainer's device.
  meter.add(loss.item<double>());
}
