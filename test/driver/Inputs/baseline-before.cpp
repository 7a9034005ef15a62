namespace c10::cuda::CUDACachingAllocator { void emptyCache(); }

void train(int epochs) {
  for (int e = 0; e < epochs; ++e) {
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
}

void evaluate(int n) {
  for (int i = 0; i < n; ++i)
    c10::cuda::CUDACachingAllocator::emptyCache();
}
