// A LibTorch bug: the converted tensor is thrown away.
#include <torch/torch.h>

torch::Tensor to_host(torch::Tensor x) {
  x.cpu();
  return x;
}
