// The training and evaluation loops of the split trainer.
#include "trainer.h"

#include <iostream>

Trainer::Trainer(int64_t features, int64_t classes, torch::Device device)
    : features_(features), classes_(classes), device_(device), model_(features, classes),
      opt_(model_->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)) {
  model_->to(device_);
}

void Trainer::fit(int64_t steps) {
  model_->train();
  for (int64_t step = 0; step < steps; ++step) {
    auto batch = make_batch(64, features_, classes_);
    auto loss = torch::nn::functional::cross_entropy(model_->forward(batch.x.to(device_)), batch.y.to(device_));
    opt_.zero_grad();
    loss.backward();
    opt_.step();
    log_step(meter_, loss);
  }
}

// Re-trains on freshly generated batches after a data refresh.
void Trainer::fit_fresh(int64_t steps) {
  for (int64_t step = 0; step < steps; ++step) {
    auto batch = make_batch(64, features_, classes_);
    // BUG(torch-device-mismatch): make_batch() (data.cpp) returns host
    // tensors; model_ was moved to the device main.cpp chose.
    auto logits = model_->forward(batch.x);
    auto loss = torch::nn::functional::cross_entropy(logits, batch.y.to(device_));
    opt_.zero_grad();
    loss.backward();
    opt_.step();
  }
}

double Trainer::evaluate(int64_t batches) {
  model_->eval();
  int64_t correct = 0, seen = 0;
  for (int64_t i = 0; i < batches; ++i) {
    auto batch = make_batch(256, features_, classes_);
    // OK(torch-inference-without-no-grad): main.cpp calls evaluate() only
    // under a NoGradGuard.
    auto logits = model_->forward(batch.x.to(device_));
    correct += logits.argmax(1).eq(batch.y.to(device_)).sum().item<int64_t>();
    seen += 256;
  }
  return static_cast<double>(correct) / static_cast<double>(seen);
}

void Trainer::warm_up_gpu() {
  // OK(torch-cuda-unguarded): main.cpp calls this only when
  // torch::cuda::is_available() is true.
  auto warm = torch::zeros({1024, 1024}, torch::kCUDA);
  std::cout << "warm-up sum " << warm.sum().item<float>() << '\n';
}
