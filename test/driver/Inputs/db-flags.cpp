// Only compiles with the flags of compile_commands.json.in.
#ifndef FROM_DATABASE
#error "compiled without the compile database's flags"
#endif
namespace c10::cuda::CUDACachingAllocator { void emptyCache(); }

void f(int n) {
  while (n--) { c10::cuda::CUDACachingAllocator::emptyCache(); }
#if defined(EXTRA_ARG) && defined(EXTRA_BEFORE)
  // Only seen with --extra-arg=-DEXTRA_ARG --extra-arg-before=-DEXTRA_BEFORE.
  while (n--) { c10::cuda::CUDACachingAllocator::emptyCache(); }
#endif
}
