#include <torch/torch.h>
torch::Tensor build();
torch::TensorOptions opts;
bool init() {
  opts = opts.device(torch::kCUDA);
  return true;
}
int main() {
  if (!init())
    return 1;
  for (int i = 0; i < 3; i++)
    auto t = build();
}
