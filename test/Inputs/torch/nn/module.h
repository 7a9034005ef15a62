#pragma once
#include <torch/types.h>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torch::nn {
template <typename Contained> class ModuleHolder;
class Module : public std::enable_shared_from_this<Module> {
public:
  Module();
  explicit Module(std::string name);
  virtual ~Module() = default;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  virtual void train(bool on = true);
  void eval();
  virtual bool is_training() const noexcept;
  virtual void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false);
  virtual void to(torch::Dtype dtype, bool non_blocking = false);
  virtual void to(torch::Device device, bool non_blocking = false);
  virtual void zero_grad(bool set_to_none = true);
  // A deep copy; its parameters stay on this module's device unless `device`.
  virtual std::shared_ptr<Module> clone(
      const c10::optional<torch::Device> &device = c10::nullopt) const;
  template <typename ModuleType>
  std::shared_ptr<ModuleType> register_module(std::string name,
                                              std::shared_ptr<ModuleType> module);
  template <typename ModuleType>
  std::shared_ptr<ModuleType> register_module(std::string name,
                                              ModuleHolder<ModuleType> module_holder);
  Tensor &register_parameter(std::string name, Tensor tensor, bool requires_grad = true);
  Tensor &register_buffer(std::string name, Tensor tensor);
};

template <typename Derived> class Cloneable : public Module {
public:
  using Module::Module;
  virtual void reset() = 0;
  std::shared_ptr<Module> clone(
      const c10::optional<torch::Device> &device = c10::nullopt) const override;
};

template <typename Contained> class ModuleHolder {
protected:
  std::shared_ptr<Contained> impl_;

public:
  using ContainedType = Contained;
  ModuleHolder() : impl_(std::make_shared<Contained>()) {}
  /* implicit */ ModuleHolder(std::nullptr_t) : impl_(nullptr) {}
  template <typename Head, typename... Tail>
  explicit ModuleHolder(Head &&head, Tail &&...tail)
      : impl_(std::make_shared<Contained>(std::forward<Head>(head), std::forward<Tail>(tail)...)) {}
  /* implicit */ ModuleHolder(std::shared_ptr<Contained> module) : impl_(std::move(module)) {}
  Contained *operator->() { return impl_.get(); }
  const Contained *operator->() const { return impl_.get(); }
  Contained &operator*() { return *impl_; }
  const std::shared_ptr<Contained> &ptr() const { return impl_; }
  Contained *get() { return impl_.get(); }
  bool is_empty() const noexcept { return impl_ == nullptr; }
  template <typename... Args>
  auto operator()(Args &&...args)
      -> decltype(std::declval<Contained &>().forward(std::forward<Args>(args)...)) {
    return impl_->forward(::std::forward<Args>(args)...);
  }
};
} // namespace torch::nn

#define TORCH_MODULE_IMPL(Name, ImplType)                                      \
  class Name : public torch::nn::ModuleHolder<ImplType> { /* NOLINT */         \
  public:                                                                      \
    using torch::nn::ModuleHolder<ImplType>::ModuleHolder;                     \
    using Impl = ImplType;                                                     \
  }

#define TORCH_MODULE(Name) TORCH_MODULE_IMPL(Name, Name##Impl)
