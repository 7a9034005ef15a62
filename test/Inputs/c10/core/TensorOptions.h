#pragma once
#include <c10/core/Device.h>
#include <c10/util/Optional.h>
#include <utility>
#include <type_traits>

namespace c10 {
struct TensorOptions {
  TensorOptions() = default;
  // Real LibTorch: any argument pack that constructs a Device converts.
  template <typename... Args,
            typename = std::enable_if_t<std::is_constructible<Device, Args &&...>::value>>
  /* implicit */ TensorOptions(Args &&...args) : device_(Device(std::forward<Args>(args)...)) {}
  /* implicit */ TensorOptions(ScalarType dtype);
  /* implicit */ TensorOptions(Layout layout);
  /* implicit */ TensorOptions(MemoryFormat memory_format);

  TensorOptions device(c10::optional<Device> device) const noexcept;
  template <typename... Args> TensorOptions device(Args &&...args) const noexcept {
    return device(c10::optional<Device>(Device(std::forward<Args>(args)...)));
  }
  TensorOptions device_index(DeviceIndex device_index) const noexcept;
  TensorOptions dtype(c10::optional<ScalarType> dtype) const noexcept;
  template <typename T> TensorOptions dtype() const noexcept;
  TensorOptions layout(c10::optional<Layout> layout) const noexcept;
  TensorOptions requires_grad(c10::optional<bool> requires_grad) const noexcept;
  TensorOptions pinned_memory(c10::optional<bool> pinned_memory) const noexcept;
  Device device() const noexcept;
  bool pinned_memory() const noexcept;
  bool requires_grad() const noexcept;

private:
  c10::optional<Device> device_;
};
inline TensorOptions device(Device device) { return TensorOptions().device(device); }
inline TensorOptions dtype(ScalarType dtype) { return TensorOptions().dtype(dtype); }
inline TensorOptions device_index(int16_t device_index) {
  return TensorOptions().device_index(static_cast<DeviceIndex>(device_index));
}
inline TensorOptions requires_grad(bool requires_grad = true) { return TensorOptions().requires_grad(requires_grad); }
} // namespace c10
