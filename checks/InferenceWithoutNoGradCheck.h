//===--- InferenceWithoutNoGradCheck.h - torch-tidy -------------*- C++ -*-===//

#ifndef TORCH_TIDY_INFERENCEWITHOUTNOGRADCHECK_H
#define TORCH_TIDY_INFERENCEWITHOUTNOGRADCHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags a module forward inside a loop that never runs backward() (nor an
/// optimizer step) while autograd records, whose output no backward ever
/// reaches: evaluation without NoGradGuard.
///
/// For the user-facing documentation see:
/// docs/checks/torch-inference-without-no-grad.md
class InferenceWithoutNoGradCheck : public ModelCheck {
public:
  InferenceWithoutNoGradCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void onStartOfTranslationUnit() override {
    ModelCheck::onStartOfTranslationUnit();
    ReportedLoops.clear();
  }

private:
  void report(const Violation &V, ProgramModel &Program) override;
  const StringRef RawBackwardFunctions;
  const StringRef RawGuardTypes;
  /// Loops already reported: one warning per loop.
  llvm::DenseSet<SourceLocation> ReportedLoops;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_INFERENCEWITHOUTNOGRADCHECK_H
