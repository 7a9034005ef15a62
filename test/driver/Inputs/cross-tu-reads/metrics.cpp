// Every call of normalise() runs with autograd off, here and in main.cpp.
#include "report.h"

torch::Tensor normalise(const torch::Tensor &t) { return t / 2; }

torch::Tensor summary_of(const torch::Tensor &t) {
  torch::NoGradGuard no_grad;
  return normalise(t);
}
