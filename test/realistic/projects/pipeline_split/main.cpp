#include "pipeline.h"

#include <iostream>

int main() {
  init_runtime();
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Loader train_loader(200, 128, 16), val_loader(20, 512, 16);
  Regressor model(train_loader.features());
  model->to(device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));

  for (int epoch = 0; epoch < 5; ++epoch) {
    train_loader.rewind();
    model->train();
    auto epoch_loss = torch::zeros({}, device);
    while (!train_loader.done()) {
      auto batch = train_loader.next();
      // BUG(torch-non-blocking-pageable): Loader::next() (loader.cpp) fills
      // the batch from host factories; upload() (transfer.cpp) asks for
      // non_blocking.
      auto x = upload(batch.x, device);
      auto y = batch.y.to(device);
      auto loss = torch::mse_loss(model->forward(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      epoch_loss += loss.detach();
    }
    std::cout << "epoch " << epoch << " loss " << epoch_loss.item<double>() << " val "
              << evaluate(model, val_loader, device) << '\n';
  }
  export_weights(model, "regressor.pt");
  return 0;
}
