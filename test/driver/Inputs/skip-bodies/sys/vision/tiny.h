// A third-party library of LibTorch modules, found with -isystem.
#pragma once
#include <torch/torch.h>

namespace vision {
struct TinyImpl : torch::nn::Module {
  // Moves itself: a fresh TinyImpl is not on the CPU.
  TinyImpl() { to(torch::kCUDA); }
  torch::Tensor forward(torch::Tensor x) { return x; }
};
TORCH_MODULE(Tiny);

// Runs no backward(), but the model summarises user code only.
inline void log_tensor(const torch::Tensor &t) { (void)t; }
} // namespace vision

// A module of LibTorch's own namespace (and one of a template) that moves
// itself as well.
namespace torch::nn {
template <int Dim> struct MovingImpl : Module {
  MovingImpl() { to(torch::kCUDA); }
  torch::Tensor forward(torch::Tensor x) { return x; }
};
using Moving2dImpl = MovingImpl<2>;
TORCH_MODULE(Moving2d);
} // namespace torch::nn
