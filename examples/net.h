// The model and the data of the torch-tidy example: a two-layer classifier
// trained on a synthetic 10-class data set of 28x28 "images".
#pragma once

#include <torch/torch.h>

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    return torch::log_softmax(fc2(torch::relu(fc1(x))), /*dim=*/1);
  }

  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

class Synthetic : public torch::data::datasets::Dataset<Synthetic> {
 public:
  explicit Synthetic(size_t n) : n_(n) {}
  torch::data::Example<> get(size_t i) override {
    return {torch::randn({784}), torch::tensor(static_cast<int64_t>(i % 10))};
  }
  torch::optional<size_t> size() const override { return n_; }

 private:
  size_t n_;
};

inline auto make_loader(size_t examples, size_t batch_size) {
  return torch::data::make_data_loader(
      Synthetic(examples).map(torch::data::transforms::Stack<>()), batch_size);
}

torch::Device second_device(torch::Device fallback);
double evaluate(Net &net, torch::Device device);
double mean_confidence(Net &net, torch::Device device);
void predict(Net &net, torch::Device device);
void init_cuda_context();
