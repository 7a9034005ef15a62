#pragma once
#include <torch/torch.h>

struct Batch {
  torch::Tensor x;
  torch::Tensor y;
};

struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

Batch make_batch(int64_t n);
void fill_batch(Batch &out, int64_t n, torch::Device device);

// Its state is set in its constructor; main.cpp, which calls fit_fresh(),
// cannot name its members.
class Trainer {
public:
  explicit Trainer(torch::Device device);
  void fit_fresh(int steps);

private:
  torch::Device device_;
  Net model_;
};
