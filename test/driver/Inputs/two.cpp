namespace c10::cuda::CUDACachingAllocator { void emptyCache(); }
namespace cca = c10::cuda::CUDACachingAllocator;

void evaluate(int n) {
  do { cca::emptyCache(); } while (--n);
  for (int i = 0; i < n; ++i) { cca::emptyCache(); cca::emptyCache(); }
}
