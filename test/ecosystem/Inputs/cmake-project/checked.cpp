#include <torch/torch.h>

void checked(torch::Tensor x) { x.cpu(); }
