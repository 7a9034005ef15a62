#pragma once
#include <torch/torch.h>

inline torch::Tensor to_device(torch::Tensor x, torch::Device d) {
  return x.to(d);
}
