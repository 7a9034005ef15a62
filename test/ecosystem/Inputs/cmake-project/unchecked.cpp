#include <torch/torch.h>

void unchecked(torch::Tensor x) { x.cpu(); }
