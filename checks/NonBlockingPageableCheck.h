//===--- NonBlockingPageableCheck.h - torch-tidy ----------------*- C++ -*-===//

#ifndef TORCH_TIDY_NONBLOCKINGPAGEABLECHECK_H
#define TORCH_TIDY_NONBLOCKINGPAGEABLECHECK_H

#include "analysis/TorchApi.h"
#include "clang-tidy/ClangTidyCheck.h"
#include "utils/UserCodeTraversal.h"

namespace clang::tidy::torch {

class TensorModel;
class TensorState;

/// Flags a host-to-device copy with non_blocking set whose source the flow
/// analysis proves to be in pageable host memory: CUDA copies it
/// synchronously, so the flag buys no overlap.
///
/// For the user-facing documentation see:
/// docs/checks/torch-non-blocking-pageable.md
class NonBlockingPageableCheck : public ClangTidyCheck {
public:
  NonBlockingPageableCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void registerMatchers(ast_matchers::MatchFinder *Finder) override;
  void check(const ast_matchers::MatchFinder::MatchResult &Result) override;
  bool isLanguageVersionSupported(const LangOptions &LangOpts) const override {
    return LangOpts.CPlusPlus;
  }

private:
  UserCodeTraversal UserCode;
  void checkCopy(const CallExpr &Call, const Expr *Source,
                 const Expr *Destination, const TensorModel &Model,
                 const TensorState &State, ASTContext &Ctx);

  const StringRef RawExtraPinnedAllocators;
  const StringRef RawExtraFactories;
  TorchApiOptions ApiOptions;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_NONBLOCKINGPAGEABLECHECK_H
