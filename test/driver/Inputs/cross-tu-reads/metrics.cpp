// Every call of normalise() runs with autograd off, here and in main.cpp;
// this TU's own call decides that for its checks, which ask nothing of
// other TUs: the audit does not analyse it again.
#include "report.h"

torch::Tensor normalise(const torch::Tensor &t) { return t / 2; }

torch::Tensor summary_of(const torch::Tensor &t) {
  torch::NoGradGuard no_grad;
  return normalise(t);
}
