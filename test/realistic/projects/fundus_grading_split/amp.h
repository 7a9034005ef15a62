// CUDA mixed precision, one spelling for LibTorch 1.13 and 2.x
// (definitions in common.cpp).
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#define FUNDUS_CUDA_AUTOCAST(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#else
#define FUNDUS_CUDA_AUTOCAST(on) at::autocast::set_enabled(on)
#endif

namespace amp {
// Switches CUDA autocast on or off for the calling thread.
void enable(bool on);
}  // namespace amp

// Runs its scope under CUDA autocast in `dtype`; the destructor restores
// the thread's previous state and dtype.
class AutocastScope {
 public:
  explicit AutocastScope(at::ScalarType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope &) = delete;
  AutocastScope &operator=(const AutocastScope &) = delete;

 private:
  bool was_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kHalf;
};
