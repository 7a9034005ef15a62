#pragma once
#include <c10/core/SymInt.h>
#include <c10/core/TensorOptions.h>
#include <c10/util/Optional.h>
#include <ostream>
#include <tuple>
#include <vector>

namespace at {
using namespace c10;
class Tensor;
using TensorList = c10::ArrayRef<Tensor>;

template <typename T, size_t N> class TensorAccessor {
public:
  T &operator[](int64_t i);
};

class Tensor {
public:
  Tensor();
  Tensor(const Tensor &);
  Tensor(Tensor &&) noexcept;
  Tensor &operator=(const Tensor &) &;
  Tensor &operator=(Tensor &&) & noexcept;
  Tensor &operator=(const Scalar &) &&;
  ~Tensor();

  // Device and memory queries.
  Device device() const;
  TensorOptions options() const;
  bool is_cuda() const;
  bool is_cpu() const;
  bool defined() const;
  void reset();
  bool requires_grad() const;
  int64_t dim() const;
  int64_t numel() const;
  int64_t size(int64_t dim) const;
  IntArrayRef sizes() const;
  ScalarType scalar_type() const;
  bool is_pinned(c10::optional<Device> device = c10::nullopt) const;

  // Conversions: all of them return a new tensor; none moves `*this`.
  Tensor to(TensorOptions options = {}, bool non_blocking = false, bool copy = false,
            c10::optional<MemoryFormat> memory_format = c10::nullopt) const;
  Tensor to(c10::optional<ScalarType> dtype, c10::optional<Layout> layout,
            c10::optional<Device> device, c10::optional<bool> pin_memory, bool non_blocking,
            bool copy, c10::optional<MemoryFormat> memory_format) const;
  Tensor to(Device device, ScalarType dtype, bool non_blocking = false, bool copy = false,
            c10::optional<MemoryFormat> memory_format = c10::nullopt) const;
  Tensor to(ScalarType dtype, bool non_blocking = false, bool copy = false,
            c10::optional<MemoryFormat> memory_format = c10::nullopt) const;
  Tensor to(const Tensor &other, bool non_blocking = false, bool copy = false,
            c10::optional<MemoryFormat> memory_format = c10::nullopt) const;
  Tensor cpu() const;
  Tensor cuda() const;
  Tensor hip() const;
  Tensor toType(ScalarType t) const;
  Tensor pin_memory(c10::optional<Device> device = c10::nullopt) const;
  Tensor contiguous(MemoryFormat memory_format = MemoryFormat::Contiguous) const;
  Tensor &copy_(const Tensor &src, bool non_blocking = false) const;
  Tensor clone(c10::optional<MemoryFormat> memory_format = c10::nullopt) const;
  Tensor detach() const;
  Tensor &detach_() const;
  Tensor &requires_grad_(bool requires_grad = true) const;

  // Host reads.
  template <typename T> T item() const;
  Scalar item() const;
  template <typename T> T *data_ptr() const;
  void *data_ptr() const;
  template <typename T, size_t N> TensorAccessor<T, N> accessor() const &;

  // Autograd.
  void backward(const Tensor &gradient = {}, c10::optional<bool> retain_graph = c10::nullopt,
                bool create_graph = false) const;
  Tensor grad() const;
  Tensor &mutable_grad() const;

  // Factories that keep this tensor's device and dtype.
  Tensor new_empty(IntArrayRef size, TensorOptions options = {}) const;
  Tensor new_empty_symint(c10::SymIntArrayRef size, TensorOptions options = {}) const;
  Tensor new_zeros(IntArrayRef size, TensorOptions options = {}) const;
  Tensor new_ones(IntArrayRef size, TensorOptions options = {}) const;
  Tensor new_full(IntArrayRef size, const Scalar &fill_value, TensorOptions options = {}) const;

  // A few device-preserving operations.
  Tensor sum() const;
  Tensor div(const Tensor &other) const;
  Tensor div(const Scalar &other) const;
  Tensor sum(int64_t dim, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(IntArrayRef dim, bool keepdim = false) const;
  Tensor amax(IntArrayRef dim = {}, bool keepdim = false) const;
  Tensor clamp_max(const Scalar &max) const;
  Tensor abs() const;
  Tensor pow(double exponent) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor to_dense() const;
  Tensor view(IntArrayRef size) const;
  Tensor triu(int64_t diagonal = 0) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor data() const;
  Tensor masked_fill(const Tensor &mask, const Scalar &value) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  Tensor view_symint(c10::SymIntArrayRef size) const;
  Tensor reshape(IntArrayRef shape) const;
  Tensor reshape_symint(c10::SymIntArrayRef shape) const;
  Tensor argmax(c10::optional<int64_t> dim = c10::nullopt, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  Tensor eq(const Tensor &other) const;
  Tensor matmul(const Tensor &other) const;
  Tensor add(const Tensor &other, const Scalar &alpha = 1) const;
  Tensor sub(const Tensor &other, const Scalar &alpha = 1) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor &add_(const Tensor &other, const Scalar &alpha = 1) const;
  Tensor &zero_() const;
  Tensor &div_(const Scalar &other) const;
  Tensor &mul_(const Scalar &other) const;

  Tensor &operator+=(const Tensor &other) const;
  Tensor &operator+=(const Scalar &other) const;
  Tensor &operator-=(const Tensor &other) const;
  Tensor &operator*=(const Tensor &other) const;
  Tensor &operator/=(const Tensor &other) const;
  Tensor &operator/=(const Scalar &other) const;
  Tensor &operator*=(const Scalar &other) const;
  Tensor operator[](int64_t index) const;
  Tensor operator-() const;
  Tensor operator~() const;
};

Tensor operator+(const Tensor &self, const Tensor &other);
Tensor operator+(const Tensor &self, const Scalar &other);
Tensor operator+(const Scalar &self, const Tensor &other);
Tensor operator-(const Tensor &self, const Tensor &other);
Tensor operator-(const Tensor &self, const Scalar &other);
Tensor operator-(const Scalar &self, const Tensor &other);
Tensor operator*(const Tensor &self, const Tensor &other);
Tensor operator*(const Tensor &self, const Scalar &other);
Tensor operator*(const Scalar &self, const Tensor &other);
Tensor operator/(const Tensor &self, const Tensor &other);
Tensor operator/(const Tensor &self, const Scalar &other);
Tensor operator==(const Tensor &self, const Tensor &other);
Tensor operator>(const Tensor &self, const Scalar &other);
Tensor operator<(const Tensor &self, const Scalar &other);
Tensor operator<=(const Tensor &self, const Scalar &other);
Tensor operator>=(const Tensor &self, const Scalar &other);
Tensor operator!=(const Tensor &self, const Tensor &other);
Tensor operator&(const Tensor &self, const Tensor &other);
Tensor operator|(const Tensor &self, const Tensor &other);
std::ostream &operator<<(std::ostream &out, const Tensor &t);
} // namespace at
