#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

// Called by train() (train.cpp) at the end of every epoch.
void end_of_epoch() {
  c10::cuda::CUDACachingAllocator::emptyCache();
}

// Called by train() once, after its loop.
void end_of_training() {
  c10::cuda::CUDACachingAllocator::emptyCache();
}
