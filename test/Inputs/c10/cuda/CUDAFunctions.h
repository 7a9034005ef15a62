#pragma once
// Mock of <c10/cuda/CUDAFunctions.h>.
#include <c10/core/Device.h>
#include <cuda_runtime_api.h>
namespace c10::cuda {
DeviceIndex device_count() noexcept;
DeviceIndex device_count_ensure_non_zero();
DeviceIndex current_device();
void set_device(DeviceIndex device);
void device_synchronize();
} // namespace c10::cuda
