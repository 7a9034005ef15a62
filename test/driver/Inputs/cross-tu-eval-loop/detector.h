#pragma once
#include <torch/torch.h>

struct DetNetImpl : torch::nn::Module {
  DetNetImpl() : fc(register_module("fc", torch::nn::Linear(4, 2))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc;
};
TORCH_MODULE(DetNet);

class Detector {
public:
  torch::Tensor predict(torch::Tensor image);
  torch::Tensor predict_guarded(torch::Tensor image);

private:
  DetNet net_;
};
