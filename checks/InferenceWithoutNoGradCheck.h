//===--- InferenceWithoutNoGradCheck.h - torch-tidy -------------*- C++ -*-===//

#ifndef TORCH_TIDY_INFERENCEWITHOUTNOGRADCHECK_H
#define TORCH_TIDY_INFERENCEWITHOUTNOGRADCHECK_H

#include "clang-tidy/ClangTidyCheck.h"
#include "utils/TrainingLoop.h"
#include "utils/UserCodeTraversal.h"
#include "llvm/ADT/DenseSet.h"
#include <memory>

namespace clang::tidy::torch {

class GradModeOracle;

/// Flags a module forward inside a loop that never runs backward() (nor an
/// optimizer step) while autograd is provably recording: no NoGradGuard,
/// InferenceMode or AutoGradMode(false) in scope, in an enclosing lambda's
/// scope, or around any call of the enclosing function in the TU.
///
/// For the user-facing documentation see:
/// docs/checks/torch-inference-without-no-grad.md
class InferenceWithoutNoGradCheck : public ClangTidyCheck {
public:
  InferenceWithoutNoGradCheck(StringRef Name, ClangTidyContext *Context);
  ~InferenceWithoutNoGradCheck() override;
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void registerMatchers(ast_matchers::MatchFinder *Finder) override;
  void check(const ast_matchers::MatchFinder::MatchResult &Result) override;
  void onStartOfTranslationUnit() override;
  bool isLanguageVersionSupported(const LangOptions &LangOpts) const override {
    return LangOpts.CPlusPlus;
  }

private:
  UserCodeTraversal UserCode;
  const StringRef RawBackwardFunctions;
  const StringRef RawGuardTypes;
  TrainingLoopOptions LoopOptions;
  std::vector<std::string> GuardTypes;
  std::unique_ptr<GradModeOracle> Oracle;
  const ASTContext *OracleContext = nullptr;
  /// Loops already reported: one warning per loop.
  llvm::DenseSet<const Stmt *> Reported;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_INFERENCEWITHOUTNOGRADCHECK_H
