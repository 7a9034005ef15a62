// A classifier trainer split over three files: data.cpp makes the batches and
// keeps the metrics, trainer.cpp trains, main.cpp chooses the device.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

struct Batch {
  torch::Tensor x;
  torch::Tensor y;
};

struct Meter {
  double sum = 0;
  int64_t count = 0;
  void add(double v) { sum += v; ++count; }
  double mean() const { return count == 0 ? 0.0 : sum / count; }
};

// data.cpp
Batch make_batch(int64_t n, int64_t features, int64_t classes);
void log_step(Meter &meter, const torch::Tensor &loss);
torch::Device select_device();

struct ClassifierImpl : torch::nn::Module {
  ClassifierImpl(int64_t features, int64_t classes)
      : fc1(register_module("fc1", torch::nn::Linear(features, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, classes))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Classifier);

class Trainer {
 public:
  Trainer(int64_t features, int64_t classes, torch::Device device);
  void fit(int64_t steps);
  void fit_fresh(int64_t steps);
  double evaluate(int64_t batches);
  void warm_up_gpu();
  const Meter &meter() const { return meter_; }

 private:
  int64_t features_, classes_;
  torch::Device device_;
  Classifier model_;
  torch::optim::SGD opt_;
  Meter meter_;
};
