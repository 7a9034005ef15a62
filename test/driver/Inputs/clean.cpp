namespace c10::cuda::CUDACachingAllocator { void emptyCache(); }

void after_training() { c10::cuda::CUDACachingAllocator::emptyCache(); }
