namespace c10::cuda::CUDACachingAllocator { void emptyCache(); }

// Ten lines of unrelated edits.
int helper_one() { return 1; }
int helper_two() { return 2; }
int helper_three() { return 3; }
/* a comment
   over
   several lines */
int helper_four() { return 4; }
int helper_five() { return 5; }

void train(int  epochs) {
  for (int e = 0; e < epochs; ++e) {
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
}

void evaluate(int n) {
  for (int i = 0; i < n; ++i)
    c10::cuda::CUDACachingAllocator::emptyCache();
}

void finetune(int n) {
  for (int i = 0; i < n; ++i)
    c10::cuda::CUDACachingAllocator::emptyCache();
}
