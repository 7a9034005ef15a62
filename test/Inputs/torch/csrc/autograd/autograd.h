#pragma once
// Mock of torch/csrc/autograd/autograd.h (LibTorch 1.13).
#include <torch/types.h>
#include <vector>

namespace torch::autograd {
using Variable = at::Tensor;
using variable_list = std::vector<Variable>;
void backward(const variable_list &tensors, const variable_list &grad_tensors = {},
              c10::optional<bool> retain_graph = c10::nullopt, bool create_graph = false,
              const variable_list &inputs = {});
variable_list grad(const variable_list &outputs, const variable_list &inputs,
                   const variable_list &grad_outputs = {},
                   c10::optional<bool> retain_graph = c10::nullopt, bool create_graph = false,
                   bool allow_unused = false);
} // namespace torch::autograd
