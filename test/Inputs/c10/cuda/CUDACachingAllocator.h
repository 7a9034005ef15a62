#pragma once
#include <cstddef>
#include <cstdint>
namespace c10::cuda::CUDACachingAllocator {
struct Stat { int64_t current = 0; int64_t peak = 0; int64_t allocated = 0; int64_t freed = 0; };
struct DeviceStats { Stat allocated_bytes[3]; Stat reserved_bytes[3]; };
void emptyCache();
void resetPeakStats(int device);
DeviceStats getDeviceStats(int device);
} // namespace c10::cuda::CUDACachingAllocator
