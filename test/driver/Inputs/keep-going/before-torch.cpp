// A dependency whose include path the compile command lacks, before torch.
#include <Eigen/Dense>
#include <torch/torch.h>

void train(torch::Tensor x) {
  x.cuda();
}
