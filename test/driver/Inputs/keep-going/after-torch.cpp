// A dependency whose include path the compile command lacks, after torch.
#include <torch/torch.h>
#include <opencv2/core.hpp>

void train(torch::Tensor x) {
  x.cuda();
}
