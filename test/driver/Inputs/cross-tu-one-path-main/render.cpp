#include <torch/torch.h>
torch::Tensor render(torch::Tensor x) { return x + torch::ones({2}).to(torch::kCUDA); }
