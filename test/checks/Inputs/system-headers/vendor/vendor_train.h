// A vendored header: system code to clang, whatever the include flags.
#pragma clang system_header
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

inline void vendor_train_loop() {
  for (int i = 0; i < 10; ++i)
    c10::cuda::CUDACachingAllocator::emptyCache();
}
