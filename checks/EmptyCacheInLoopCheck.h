//===--- EmptyCacheInLoopCheck.h - torch-tidy -------------------*- C++ -*-===//

#ifndef TORCH_TIDY_EMPTYCACHEINLOOPCHECK_H
#define TORCH_TIDY_EMPTYCACHEINLOOPCHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags `emptyCache()` run inside a loop: in the loop's body, or in a
/// function or lambda that the loop calls.
///
/// For the user-facing documentation see:
/// docs/checks/torch-empty-cache-in-loop.md
class EmptyCacheInLoopCheck : public ModelCheck {
public:
  EmptyCacheInLoopCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void report(const Violation &V, ProgramModel &Program) override;
  /// Further functions, fully qualified, that empty a caching allocator.
  const StringRef ExtraEmptyCacheFunctions;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_EMPTYCACHEINLOOPCHECK_H
