//===--- EmptyCacheOomRetryCheck.h - torch-tidy -----------------*- C++ -*-===//

#ifndef TORCH_TIDY_EMPTYCACHEOOMRETRYCHECK_H
#define TORCH_TIDY_EMPTYCACHEOOMRETRYCHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags `emptyCache()` in an out-of-memory handler when the failed work
/// then runs again at the same size: retried in the handler, after it, or by
/// a loop around the `try`.
///
/// For the user-facing documentation see:
/// docs/checks/torch-empty-cache-oom-retry.md
class EmptyCacheOomRetryCheck : public ModelCheck {
public:
  EmptyCacheOomRetryCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void report(const Violation &V, ProgramModel &Program) override;
  /// Further functions, fully qualified, that empty a caching allocator.
  const StringRef ExtraEmptyCacheFunctions;
  /// Substrings (case-insensitive) of string literals that show a generic
  /// handler is testing for an out-of-memory error.
  const StringRef OutOfMemoryMessages;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_EMPTYCACHEOOMRETRYCHECK_H
