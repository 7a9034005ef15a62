#pragma once
#include <c10/core/Device.h>
#include <cuda_runtime_api.h>
namespace c10::cuda {
class CUDAStream {
public:
  cudaStream_t stream() const;
  Device device() const;
  bool query() const;
  void synchronize() const;
  operator cudaStream_t() const;
};
CUDAStream getCurrentCUDAStream(DeviceIndex device_index = -1);
CUDAStream getStreamFromPool(bool isHighPriority = false, DeviceIndex device = -1);
void setCurrentCUDAStream(CUDAStream stream);
} // namespace c10::cuda
namespace at::cuda {
using c10::cuda::CUDAStream;
using c10::cuda::getCurrentCUDAStream;
using c10::cuda::getStreamFromPool;
} // namespace at::cuda
