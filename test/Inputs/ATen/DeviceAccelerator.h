#pragma once
// Mock of <ATen/DeviceAccelerator.h> as of LibTorch 2.8 (at::accelerator;
// 2.6 has only getAccelerator and isAccelerator, in at::). torch:: sees it
// as torch::accelerator through `using namespace at`.
#include <c10/core/Device.h>
#include <optional>
namespace at::accelerator {
std::optional<c10::DeviceType> getAccelerator(bool checked = false);
bool isAccelerator(c10::DeviceType device_type);
c10::DeviceIndex deviceCount();
void setDeviceIndex(c10::DeviceIndex device_index);
c10::DeviceIndex getDeviceIndex();
void synchronizeDevice(c10::DeviceIndex device_index);
c10::DeviceIndex exchangeDevice(c10::DeviceIndex device_index);
// Inline in the real header: forwards to the accelerator's device allocator.
void emptyCache();
} // namespace at::accelerator
namespace at {
using at::accelerator::getAccelerator;
using at::accelerator::isAccelerator;
} // namespace at
