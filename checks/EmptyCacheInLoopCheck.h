//===--- EmptyCacheInLoopCheck.h - torch-tidy -------------------*- C++ -*-===//

#ifndef TORCH_TIDY_EMPTYCACHEINLOOPCHECK_H
#define TORCH_TIDY_EMPTYCACHEINLOOPCHECK_H

#include "clang-tidy/ClangTidyCheck.h"
#include "model/UserCodeTraversal.h"

namespace clang::tidy::torch {

/// Flags `emptyCache()` called once per loop iteration, directly or through a
/// lambda defined in the loop.
///
/// For the user-facing documentation see:
/// docs/checks/torch-empty-cache-in-loop.md
class EmptyCacheInLoopCheck : public ClangTidyCheck {
public:
  EmptyCacheInLoopCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void registerMatchers(ast_matchers::MatchFinder *Finder) override;
  void check(const ast_matchers::MatchFinder::MatchResult &Result) override;
  bool isLanguageVersionSupported(const LangOptions &LangOpts) const override {
    return LangOpts.CPlusPlus;
  }

private:
  UserCodeTraversal UserCode;
  /// Further functions, fully qualified, that empty a caching allocator.
  const StringRef ExtraEmptyCacheFunctions;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_EMPTYCACHEINLOOPCHECK_H
