#pragma once
#include <torch/types.h>
#include <vector>

namespace torch::optim {
class Optimizer {
public:
  virtual ~Optimizer() = default;
  virtual Tensor step();
  void zero_grad(bool set_to_none = true);
};
struct SGDOptions {
  SGDOptions(double lr);
  SGDOptions &momentum(double momentum);
};
class SGD : public Optimizer {
public:
  SGD(std::vector<Tensor> params, SGDOptions defaults);
  Tensor step() override;
};
struct AdamOptions {
  AdamOptions(double lr = 1e-3);
};
class Adam : public Optimizer {
public:
  Adam(std::vector<Tensor> params, AdamOptions defaults = {});
  Tensor step() override;
};
} // namespace torch::optim
