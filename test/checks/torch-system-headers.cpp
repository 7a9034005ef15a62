// The torch checks never analyse system headers, and they narrow clang-tidy's
// AST walk to user code to save its cost. With --system-headers the walk
// stays whole, so that the other checks of the same run still see system
// code.
// RUN: %clang_tidy_plugin \
// RUN:   --checks='-*,torch-empty-cache-in-loop,readability-braces-around-statements' \
// RUN:   %s -- -std=c++17 -isystem %inputs \
// RUN:   2>&1 | FileCheck %s --check-prefix=USER --implicit-check-not=warning:
// RUN: %clang_tidy_plugin \
// RUN:   --checks='-*,torch-empty-cache-in-loop,readability-braces-around-statements' \
// RUN:   --system-headers --header-filter=vendor_train %s -- \
// RUN:   -std=c++17 -isystem %inputs \
// RUN:   2>&1 | FileCheck %s --check-prefixes=SYSTEM,USER \
// RUN:   --implicit-check-not=warning:

#include "Inputs/system-headers/vendor/vendor_train.h"
// SYSTEM: vendor_train.h:7:31: warning: statement should be inside braces [readability-braces-around-statements]

void user_train_loop() {
  for (int i = 0; i < 10; ++i)
    c10::cuda::CUDACachingAllocator::emptyCache();
}
// USER: torch-system-headers.cpp:[[@LINE-3]]:31: warning: statement should be inside braces
// USER: torch-system-headers.cpp:[[@LINE-3]]:5: warning: 'emptyCache()' inside a loop
