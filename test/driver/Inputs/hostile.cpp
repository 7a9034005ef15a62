namespace c10::cuda::CUDACachingAllocator { void emptyCache(); }
// </script><script>alert(1)</script>
// <img src=x onerror="document.title='pwned'">
void f(int n) {
  for (int i = 0; i < n; ++i) c10::cuda::CUDACachingAllocator::emptyCache(); // </script><script>alert(1)</script>
}
#error </script><script>alert(1)</script> & <img src=x onerror="document.title='pwned'">
