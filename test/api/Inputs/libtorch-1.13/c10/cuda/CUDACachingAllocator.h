#pragma once
// The LibTorch 1.13 form of the mock <c10/cuda/CUDACachingAllocator.h>:
// plain declarations, and get() returns the generic c10::Allocator.
#include <cstddef>
#include <cstdint>
namespace c10 {
struct Allocator;
} // namespace c10
namespace c10::cuda::CUDACachingAllocator {
struct Stat { int64_t current = 0; int64_t peak = 0; int64_t allocated = 0; int64_t freed = 0; };
struct DeviceStats { Stat allocated_bytes[3]; Stat reserved_bytes[3]; };
Allocator *get();
void emptyCache();
void resetPeakStats(int device);
DeviceStats getDeviceStats(int device);
} // namespace c10::cuda::CUDACachingAllocator
