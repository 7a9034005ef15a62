#pragma once
// LibTorch 2.x: the functions are inline wrappers that forward to the
// allocator object (1.13 declared them plainly:
// test/api/Inputs/libtorch-1.13/c10/cuda/CUDACachingAllocator.h).
#include <c10/core/Device.h>
#include <atomic>
#include <cstddef>
#include <cstdint>
namespace c10::cuda::CUDACachingAllocator {
struct Stat { int64_t current = 0; int64_t peak = 0; int64_t allocated = 0; int64_t freed = 0; };
struct DeviceStats { Stat allocated_bytes[3]; Stat reserved_bytes[3]; };
class CUDAAllocator {
public:
  virtual ~CUDAAllocator() = default;
  virtual void emptyCache() = 0;
  virtual DeviceStats getDeviceStats(c10::DeviceIndex device) = 0;
  virtual void resetPeakStats(c10::DeviceIndex device) = 0;
};
extern std::atomic<CUDAAllocator *> allocator;
inline CUDAAllocator *get() { return allocator.load(); }
inline void emptyCache() { return get()->emptyCache(); }
inline DeviceStats getDeviceStats(c10::DeviceIndex device) { return get()->getDeviceStats(device); }
inline void resetPeakStats(c10::DeviceIndex device) { return get()->resetPeakStats(device); }
} // namespace c10::cuda::CUDACachingAllocator
