// The autoencoder and its trainer.
#include "scada.h"

#include <iostream>

PumpAutoencoderImpl::PumpAutoencoderImpl() {
  encoder = register_module(
      "encoder",
      torch::nn::Sequential(torch::nn::Conv1d(torch::nn::Conv1dOptions(kChannels, 32, 5).padding(2)),
                            torch::nn::BatchNorm1d(32), torch::nn::ReLU(),
                            torch::nn::Conv1d(torch::nn::Conv1dOptions(32, 16, 5).stride(2).padding(2)),
                            torch::nn::BatchNorm1d(16), torch::nn::ReLU()));
  drop = register_module("drop", torch::nn::Dropout(0.1));
  decoder = register_module(
      "decoder",
      torch::nn::Sequential(
          torch::nn::ConvTranspose1d(torch::nn::ConvTranspose1dOptions(16, 32, 4).stride(2).padding(1)),
          torch::nn::ReLU(), torch::nn::Conv1d(torch::nn::Conv1dOptions(32, kChannels, 5).padding(2))));
}

torch::Tensor PumpAutoencoderImpl::forward(torch::Tensor x) {
  return decoder->forward(drop(encoder->forward(x)));
}

Trainer::Trainer(PumpAutoencoder model, double lr)
    : model_(std::move(model)), opt_(model_->parameters(), torch::optim::AdamWOptions(lr).weight_decay(1e-4)) {}

void Trainer::fit(HistorianFeed &feed, int64_t steps) {
  model_->train();
  for (int64_t step = 0; step < steps; ++step) {
    WindowBatch batch = feed.next();
    // OK(torch-non-blocking-pageable): next() (data.cpp) pins the values
    // whenever there is a GPU to copy them to.
    auto x = batch.values.to(Env::device(), /*non_blocking=*/true);
    // BUG(torch-non-blocking-pageable): the fault flags are a clone() of a
    // from_blob() view in next() (data.cpp): pageable memory.
    auto healthy = batch.healthy.to(Env::device(), /*non_blocking=*/true).to(torch::kFloat);

    auto recon = model_->forward(x);
    auto per_window = (recon - x).pow(2).mean({1, 2});
    // Faulty windows are masked out: the model must only learn normal
    // operation.
    auto loss = (per_window * healthy).sum() / healthy.sum().clamp_min(1.0);
    opt_.zero_grad();
    loss.backward();
    opt_.step();

    if (loss_diverged(loss)) {
      std::cerr << "loss diverged at step " << step << ", stopping\n";
      break;
    }
    if (step % 250 == 0) {
      // OK(torch-host-sync-in-loop): one step in 250.
      std::cout << "step " << step << " masked MSE " << loss.item<double>() << '\n';
    }
  }
}
