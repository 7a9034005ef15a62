#include "no-such-header.h"
namespace c10::cuda::CUDACachingAllocator { void emptyCache(); }

void train() {
  while (true) { c10::cuda::CUDACachingAllocator::emptyCache(); }
}
