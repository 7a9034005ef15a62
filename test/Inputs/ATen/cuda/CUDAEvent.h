#pragma once
#include <c10/cuda/CUDAStream.h>
namespace at::cuda {
struct CUDAEvent {
  CUDAEvent();
  void record();
  void record(const CUDAStream &stream);
  void block(const CUDAStream &stream);
  bool query() const;
  void synchronize() const;
};
} // namespace at::cuda
