#pragma once
#include <cstddef>
#include <cstdint>
namespace torch::cuda {
size_t device_count();
bool is_available();
bool cudnn_is_available();
void manual_seed(uint64_t seed);
void manual_seed_all(uint64_t seed);
void synchronize(int64_t device_index = -1);
} // namespace torch::cuda
