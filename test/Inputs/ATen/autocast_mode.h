#pragma once
// Mock of <ATen/autocast_mode.h> (LibTorch 2.6): autocast per device type.
// 1.13 had CUDA-only set_enabled(bool) and is_enabled(), deprecated in 2.x.
#include <ATen/core/TensorBody.h>
namespace at::autocast {
bool is_autocast_enabled(at::DeviceType device_type);
void set_autocast_enabled(at::DeviceType device_type, bool enabled);
at::ScalarType get_autocast_dtype(at::DeviceType device_type);
void set_autocast_dtype(at::DeviceType device_type, at::ScalarType dtype);
void clear_cache();
int increment_nesting();
int decrement_nesting();
[[deprecated]] bool is_enabled();
[[deprecated]] void set_enabled(bool enabled);
} // namespace at::autocast
