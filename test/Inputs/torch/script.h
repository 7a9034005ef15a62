#pragma once
// Mock of <torch/script.h>: TorchScript modules and their IValues.
#include <torch/types.h>
#include <torch/csrc/autograd/autograd.h>
#include <istream>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace c10 {
// The real one is an intrusive reference count; only `->` matters here.
template <typename T> class intrusive_ptr {
public:
  T *operator->() const;
  T &operator*() const;
  T *get() const;
};
class IValue;
namespace ivalue {
struct Tuple {
  const std::vector<IValue> &elements() const &;
};
} // namespace ivalue
class IValue {
public:
  IValue();
  IValue(at::Tensor t);
  IValue(double d);
  IValue(int64_t i);
  IValue(bool b);
  IValue(std::vector<at::Tensor> v);
  bool isTensor() const;
  bool isTuple() const;
  at::Tensor toTensor() &&;
  at::Tensor &toTensor() &;
  const at::Tensor &toTensor() const &;
  c10::intrusive_ptr<ivalue::Tuple> toTuple() const &;
  std::vector<at::Tensor> toTensorVector() const;
  double toDouble() const;
  int64_t toInt() const;
};
} // namespace c10

namespace torch::jit {
using c10::IValue;
using Kwargs = std::unordered_map<std::string, IValue>;
struct Object {
  IValue attr(const std::string &name) const;
};
struct Module : public Object {
  Module();
  explicit Module(std::string class_name);
  IValue forward(std::vector<IValue> inputs, const Kwargs &kwargs = Kwargs());
  IValue run_method(const std::string &method_name);
  void train(bool on = true);
  void eval();
  bool is_training() const;
  void to(at::Device device, at::ScalarType dtype, bool non_blocking = false);
  void to(at::ScalarType dtype, bool non_blocking = false);
  void to(at::Device device, bool non_blocking = false);
  std::vector<at::Tensor> parameters(bool recurse = true) const;
};
Module load(std::istream &in, std::optional<c10::Device> device = std::nullopt,
            bool load_debug_files = true);
Module load(const std::string &filename,
            std::optional<c10::Device> device = std::nullopt,
            bool load_debug_files = true);
namespace script {
using Module = ::torch::jit::Module;
} // namespace script
} // namespace torch::jit
