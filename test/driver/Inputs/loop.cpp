namespace c10::cuda::CUDACachingAllocator { void emptyCache(); }

void train(int steps) {
  for (int i = 0; i < steps; ++i) {
	c10::cuda::CUDACachingAllocator::emptyCache();
  }
  while (steps--) {
    c10::cuda::CUDACachingAllocator::emptyCache(); // NOLINT(torch-empty-cache-in-loop)
  }
}
