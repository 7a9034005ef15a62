// A regression pipeline split over files: loader.cpp produces host batches,
// transfer.cpp moves tensors and sets the runtime up, eval.cpp evaluates,
// main.cpp trains.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

struct HostBatch {
  torch::Tensor x;
  torch::Tensor y;
};

class Loader {
 public:
  Loader(int64_t batches, int64_t batch, int64_t features);
  bool done() const { return served_ >= batches_; }
  void rewind() { served_ = 0; }
  HostBatch next();
  int64_t features() const { return features_; }

 private:
  int64_t batches_, batch_, features_;
  int64_t served_ = 0;
};

struct RegressorImpl : torch::nn::Module {
  explicit RegressorImpl(int64_t features)
      : body(register_module("body", torch::nn::Linear(features, 64))),
        head(register_module("head", torch::nn::Linear(64, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return head(torch::tanh(body(x))); }
  torch::nn::Linear body, head;
};
TORCH_MODULE(Regressor);

// transfer.cpp
void init_runtime();
torch::Tensor upload(const torch::Tensor &host, torch::Device device);
void export_weights(Regressor &model, const std::string &path);

// eval.cpp
double evaluate(Regressor &model, Loader &loader, torch::Device device);
