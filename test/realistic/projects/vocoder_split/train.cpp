// Pre-training with gradient accumulation, and speaker fine-tuning.
#include "vocoder.h"

void train_vocoder(Generator &gen, MelBatcher &batcher, torch::Device device, int64_t steps) {
  set_training(gen);
  torch::optim::Adam opt(gen->parameters(), torch::optim::AdamOptions(2e-4).betas(std::make_tuple(0.8, 0.99)));
  auto window = torch::hann_window(kFrame, torch::TensorOptions().device(device));
  auto after_step = [&] { release_activations(); };
  Progress progress("pretrain", 100);

  zero_all(opt);
  for (int64_t step = 0; step < steps; ++step) {
    batcher.refill(step);
    // OK(torch-non-blocking-pageable): MelBatcher's mel buffer (audio.cpp) is
    // page-locked.
    auto mel = batcher.mels().to(device, /*non_blocking=*/true);
    // BUG(torch-non-blocking-pageable): MelBatcher's audio buffer (audio.cpp)
    // is plain pageable memory; the copy runs synchronously.
    auto wav = batcher.audio().to(device, /*non_blocking=*/true);
    auto fake = gen->forward(mel);
    auto loss = spectral_l1(fake, wav, window);
    // BUG(torch-grad-accumulation-unscaled): spectral_l1() (audio.cpp) is a
    // mean L1; four micro-batches add up before each step, never divided.
    loss.backward();
    if ((step + 1) % kAccum == 0) {
      // OK(torch-missing-zero-grad): zero_all() (model.cpp) resets right
      // after each step, under the same condition.
      opt.step();
      zero_all(opt);
    }
    progress.tick(step, loss);
    after_step();
  }
}

void finetune_on_speaker(Generator &gen, MelBatcher &batcher, torch::Device device, int64_t steps) {
  torch::optim::Adam opt(gen->parameters(), torch::optim::AdamOptions(5e-5));
  auto window = torch::hann_window(kFrame, torch::TensorOptions().device(device));
  for (int64_t step = 0; step < steps; ++step) {
    batcher.refill(1000000 + step);
    auto mel = batcher.mels().to(device, /*non_blocking=*/true);
    auto wav = batcher.audio().to(device);
    // BUG(torch-eval-mode-missing): main.cpp calls this after
    // prepare_for_synthesis() (model.cpp) put the generator in eval mode;
    // BatchNorm trains on frozen running statistics.
    auto fake = gen->forward(mel);
    auto loss = spectral_l1(fake, wav, window);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}
