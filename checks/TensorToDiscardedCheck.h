//===--- TensorToDiscardedCheck.h - torch-tidy ------------------*- C++ -*-===//

#ifndef TORCH_TIDY_TENSORTODISCARDEDCHECK_H
#define TORCH_TIDY_TENSORTODISCARDEDCHECK_H

#include "clang-tidy/ClangTidyCheck.h"
#include "support/UserCodeTraversal.h"
#include "llvm/ADT/DenseSet.h"

namespace clang::tidy::torch {

/// Flags a tensor conversion (`x.to(...)`, `x.cuda()`, `x.pin_memory()`, ...)
/// whose result is thrown away: the conversion returns a new tensor and
/// leaves `x` where it was.
///
/// For the user-facing documentation see:
/// docs/checks/torch-tensor-to-discarded.md
class TensorToDiscardedCheck : public ClangTidyCheck {
public:
  TensorToDiscardedCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void registerMatchers(ast_matchers::MatchFinder *Finder) override;
  void check(const ast_matchers::MatchFinder::MatchResult &Result) override;
  bool isLanguageVersionSupported(const LangOptions &LangOpts) const override {
    return LangOpts.CPlusPlus;
  }

private:
  UserCodeTraversal UserCode;
  /// Further `at::Tensor` methods, by plain name, that return a converted copy.
  const StringRef ExtraConversionMethods;
  /// A call of a template is met in each instantiation: reported once.
  llvm::DenseSet<SourceLocation> Reported;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_TENSORTODISCARDEDCHECK_H
