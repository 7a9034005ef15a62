#pragma once
#include <ATen/Functions.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <initializer_list>

namespace torch {
using namespace at; // NOLINT
using c10::nullopt;
using c10::optional;
using Dtype = at::ScalarType;
constexpr auto kFloat16 = at::kHalf;
constexpr auto kFloat64 = at::kDouble;
constexpr auto kInt64 = at::kLong;
using NoGradGuard = at::NoGradGuard;
using AutoGradMode = at::AutoGradMode;

namespace detail {
// Simplified: the real container also nests initializer lists of any depth.
class TensorDataContainer {
public:
  TensorDataContainer(int v);
  TensorDataContainer(long v);
  TensorDataContainer(float v);
  TensorDataContainer(double v);
  TensorDataContainer(bool v);
  TensorDataContainer(std::initializer_list<TensorDataContainer> init_list);
  template <typename T> TensorDataContainer(const std::vector<T> &values);
  bool is_scalar() const;
};
} // namespace detail

// torch:: factories (torch/csrc/autograd/generated/variable_factories.h).
Tensor tensor(detail::TensorDataContainer tensor_data_container,
              const TensorOptions &options = {});
Tensor randn(IntArrayRef size, TensorOptions options = {});
Tensor rand(IntArrayRef size, TensorOptions options = {});
Tensor zeros(IntArrayRef size, TensorOptions options = {});
Tensor ones(IntArrayRef size, TensorOptions options = {});
Tensor empty(IntArrayRef size, TensorOptions options = {},
             c10::optional<MemoryFormat> memory_format = c10::nullopt);
Tensor full(IntArrayRef size, const Scalar &fill_value, TensorOptions options = {});
Tensor arange(const Scalar &end, TensorOptions options = {});
Tensor arange(const Scalar &start, const Scalar &end, TensorOptions options = {});
Tensor eye(int64_t n, TensorOptions options = {});
Tensor hann_window(int64_t window_length, TensorOptions options = {});
Tensor linspace(const Scalar &start, const Scalar &end, int64_t steps, TensorOptions options = {});
Tensor randint(int64_t high, IntArrayRef size, TensorOptions options = {});
Tensor randint(int64_t low, int64_t high, IntArrayRef size, TensorOptions options = {});
Tensor from_blob(void *data, IntArrayRef sizes, const TensorOptions &options = {});
Tensor scalar_tensor(const Scalar &s, TensorOptions options = {});
// The SymInt overloads (2.x has them for every factory that takes sizes).
Tensor randn_symint(c10::SymIntArrayRef size, TensorOptions options = {});
Tensor rand_symint(c10::SymIntArrayRef size, TensorOptions options = {});
Tensor zeros_symint(c10::SymIntArrayRef size, TensorOptions options = {});
Tensor ones_symint(c10::SymIntArrayRef size, TensorOptions options = {});
Tensor empty_symint(c10::SymIntArrayRef size, TensorOptions options = {},
                    c10::optional<MemoryFormat> memory_format = c10::nullopt);
Tensor full_symint(c10::SymIntArrayRef size, const Scalar &fill_value, TensorOptions options = {});
Tensor zeros_like(const Tensor &self, TensorOptions options = {});
Tensor ones_like(const Tensor &self, TensorOptions options = {});
Tensor empty_like(const Tensor &self, TensorOptions options = {});
Tensor randn_like(const Tensor &self, TensorOptions options = {});
Tensor rand_like(const Tensor &self, TensorOptions options = {});
Tensor full_like(const Tensor &self, const Scalar &fill_value, TensorOptions options = {});
} // namespace torch
