#include "gan.h"

#include <iostream>

GanStats train_gan(Gen &gen, Disc &disc, torch::Device device, int64_t epochs, int64_t steps) {
  torch::optim::Adam g_opt(gen->parameters(), torch::optim::AdamOptions(1e-3).betas({0.5, 0.999}));
  torch::optim::Adam d_opt(disc->parameters(), torch::optim::AdamOptions(1e-3).betas({0.5, 0.999}));
  GanStats stats{torch::zeros({}, device), torch::zeros({}, device)};
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    for (int64_t step = 0; step < steps; ++step) {
      // BUG(torch-non-blocking-pageable): sample_real() (utils.cpp) builds
      // the batch with host factories, never pinned.
      auto real = sample_real(256).to(device, /*non_blocking=*/true);
      auto fake = gen->forward(torch::randn({256, kNoise}, device));

      d_opt.zero_grad();
      auto d_loss = discriminator_loss(disc, real, fake.detach());
      d_loss.backward();
      d_opt.step();

      g_opt.zero_grad();
      auto g_loss = generator_loss(disc, fake);
      g_loss.backward();
      g_opt.step();

      // BUG(torch-loss-accumulation-graph): discriminator_loss() (models.cpp)
      // returns a loss with its graph; the stats outlive every step.
      stats.d_total += d_loss;
      // OK(torch-loss-accumulation-graph): detached.
      stats.g_total += g_loss.detach();
      ++stats.steps;
    }
    end_of_epoch();
  }
  return stats;
}
