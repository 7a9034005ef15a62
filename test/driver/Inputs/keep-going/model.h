#pragma once
// A project header whose own dependency is missing: torch comes after it.
#include <Python.h>
#include <torch/torch.h>

struct Model {
  torch::Tensor weight;
};
