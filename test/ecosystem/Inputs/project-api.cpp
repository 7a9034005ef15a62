// Code that uses the project functions named in examples/.clang-tidy.
#include <torch/torch.h>

namespace myproj {
// Chooses CUDA when asked for and present, else the CPU (its check is not
// visible here).
torch::Device select_device(torch::Device preferred);
} // namespace myproj

torch::Tensor place(torch::Tensor x) {
  return x.to(myproj::select_device(torch::kCUDA));
}

torch::Tensor densify(torch::Tensor x) {
  x.to_dense();
  return x;
}
