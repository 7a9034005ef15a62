#include "pipeline.h"

double evaluate(Regressor &model, Loader &loader, torch::Device device) {
  model->eval();
  loader.rewind();
  double total = 0;
  int64_t batches = 0;
  while (!loader.done()) {
    auto batch = loader.next();
    // BUG(torch-inference-without-no-grad): main.cpp calls evaluate() with
    // no guard; this loop never calls backward().
    auto pred = model->forward(batch.x.to(device));
    total += torch::mse_loss(pred, batch.y.to(device)).item<double>();
    ++batches;
  }
  return total / static_cast<double>(batches);
}
