#pragma once
#include <torch/nn/module.h>

namespace torch::nn {
struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features);
  LinearOptions &bias(bool with_bias);
};
class LinearImpl : public Cloneable<LinearImpl> {
public:
  LinearImpl(int64_t in_features, int64_t out_features);
  explicit LinearImpl(const LinearOptions &options);
  void reset() override;
  Tensor forward(const Tensor &input);
  Tensor weight;
  Tensor bias;
};
TORCH_MODULE(Linear);

struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size);
};
class Conv2dImpl : public Cloneable<Conv2dImpl> {
public:
  Conv2dImpl(int64_t input_channels, int64_t output_channels, int64_t kernel_size);
  explicit Conv2dImpl(Conv2dOptions options);
  void reset() override;
  Tensor forward(const Tensor &input);
};
TORCH_MODULE(Conv2d);

class ReLUImpl : public Cloneable<ReLUImpl> {
public:
  ReLUImpl();
  void reset() override;
  Tensor forward(Tensor input);
};
TORCH_MODULE(ReLU);

class DropoutImpl : public Cloneable<DropoutImpl> {
public:
  explicit DropoutImpl(double p = 0.5);
  void reset() override;
  Tensor forward(Tensor input);
};
TORCH_MODULE(Dropout);

// The real batch norms derive from BatchNormImplBase<D, Derived>.
class BatchNorm2dImpl : public Cloneable<BatchNorm2dImpl> {
public:
  explicit BatchNorm2dImpl(int64_t num_features);
  void reset() override;
  Tensor forward(const Tensor &input);
};
TORCH_MODULE(BatchNorm2d);

class LayerNormImpl : public Cloneable<LayerNormImpl> {
public:
  explicit LayerNormImpl(std::vector<int64_t> normalized_shape);
  void reset() override;
  Tensor forward(const Tensor &input);
};
TORCH_MODULE(LayerNorm);

class SequentialImpl : public Cloneable<SequentialImpl> {
public:
  SequentialImpl();
  template <typename... Modules> explicit SequentialImpl(Modules &&...modules);
  void reset() override;
  template <typename ReturnType = Tensor, typename... InputTypes>
  ReturnType forward(InputTypes &&...inputs);
  template <typename ModuleType> void push_back(ModuleType module);
};
TORCH_MODULE(Sequential);

// A type-erased module: it holds any module, and is no module itself.
class AnyModule {
public:
  AnyModule() = default;
  template <typename ModuleType> explicit AnyModule(ModuleHolder<ModuleType> module);
  template <typename... ArgumentTypes> Tensor forward(ArgumentTypes &&...arguments);
  std::shared_ptr<Module> ptr() const;
};

} // namespace torch::nn

// The reductions of the real headers (torch/enum.h): a variant of these.
namespace torch {
namespace enumtype {
struct kNone {};
struct kMean {};
struct kSum {};
} // namespace enumtype
extern const enumtype::kNone kNone;
extern const enumtype::kMean kMean;
extern const enumtype::kSum kSum;
} // namespace torch

namespace torch::nn {
struct LossReduction {
  LossReduction(enumtype::kNone);
  LossReduction(enumtype::kMean);
  LossReduction(enumtype::kSum);
};
struct MSELossOptions {
  MSELossOptions &reduction(const LossReduction &r);
};
struct CrossEntropyLossOptions {
  CrossEntropyLossOptions &ignore_index(int64_t index);
  CrossEntropyLossOptions &reduction(const LossReduction &r);
};

namespace functional {
struct MSELossFuncOptions {
  MSELossFuncOptions &reduction(const LossReduction &r);
};
struct CrossEntropyFuncOptions {
  CrossEntropyFuncOptions &reduction(const LossReduction &r);
  CrossEntropyFuncOptions &weight(const Tensor &weight);
};
struct NLLLossFuncOptions {};
Tensor mse_loss(const Tensor &input, const Tensor &target,
                const MSELossFuncOptions &options = {});
Tensor l1_loss(const Tensor &input, const Tensor &target);
Tensor cross_entropy(const Tensor &input, const Tensor &target,
                     const CrossEntropyFuncOptions &options = {});
Tensor nll_loss(const Tensor &input, const Tensor &target,
                const NLLLossFuncOptions &options = {});
Tensor binary_cross_entropy(const Tensor &input, const Tensor &target);
Tensor relu(Tensor input);
Tensor log_softmax(const Tensor &input, int64_t dim);
} // namespace functional

class MSELossImpl : public Cloneable<MSELossImpl> {
public:
  explicit MSELossImpl(const MSELossOptions &options = {});
  void reset() override;
  Tensor forward(const Tensor &input, const Tensor &target);
};
TORCH_MODULE(MSELoss);
class CrossEntropyLossImpl : public Cloneable<CrossEntropyLossImpl> {
public:
  explicit CrossEntropyLossImpl(const CrossEntropyLossOptions &options = {});
  void reset() override;
  Tensor forward(const Tensor &input, const Tensor &target);
};
TORCH_MODULE(CrossEntropyLoss);
} // namespace torch::nn
