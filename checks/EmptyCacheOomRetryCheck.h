//===--- EmptyCacheOomRetryCheck.h - torch-tidy -----------------*- C++ -*-===//

#ifndef TORCH_TIDY_EMPTYCACHEOOMRETRYCHECK_H
#define TORCH_TIDY_EMPTYCACHEOOMRETRYCHECK_H

#include "clang-tidy/ClangTidyCheck.h"
#include "support/UserCodeTraversal.h"

namespace clang::tidy::torch {

/// Flags `emptyCache()` in an out-of-memory handler that then retries the
/// same work at the same size, either through a loop around the `try` or by
/// calling the failed function again in the handler.
///
/// For the user-facing documentation see:
/// docs/checks/torch-empty-cache-oom-retry.md
class EmptyCacheOomRetryCheck : public ClangTidyCheck {
public:
  EmptyCacheOomRetryCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void registerMatchers(ast_matchers::MatchFinder *Finder) override;
  void check(const ast_matchers::MatchFinder::MatchResult &Result) override;
  bool isLanguageVersionSupported(const LangOptions &LangOpts) const override {
    return LangOpts.CPlusPlus;
  }

private:
  UserCodeTraversal UserCode;
  /// True when the handler \p Body (of a `c10::Error` or `std::exception`
  /// catch) mentions one of the out-of-memory messages.
  bool testsForOutOfMemory(const Stmt &Body, ASTContext &Ctx) const;

  /// Further functions, fully qualified, that empty a caching allocator.
  const StringRef ExtraEmptyCacheFunctions;
  /// Substrings (case-insensitive) of string literals that show a generic
  /// handler is testing for an out-of-memory error.
  const StringRef OutOfMemoryMessages;
  std::vector<std::string> LoweredMessages;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_EMPTYCACHEOOMRETRYCHECK_H
