namespace c10::cuda::CUDACachingAllocator { void emptyCache(); }

void broken() {
  for (;;) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    undeclared_function();
  }
}
