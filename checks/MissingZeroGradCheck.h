//===--- MissingZeroGradCheck.h - torch-tidy --------------------*- C++ -*-===//

#ifndef TORCH_TIDY_MISSINGZEROGRADCHECK_H
#define TORCH_TIDY_MISSINGZEROGRADCHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags an optimizer step() after which some path reaches the next
/// backward() without resetting any gradients.
///
/// For the user-facing documentation see:
/// docs/checks/torch-missing-zero-grad.md
class MissingZeroGradCheck : public ModelCheck {
public:
  MissingZeroGradCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void report(const Violation &V, ProgramModel &Program) override;
  void reportStep(const Violation &V, const Stmt &Step, SourceLocation Loc,
                  bool OfferFix, ProgramModel &Program);

  const StringRef RawZeroGradFunctions;
  const StringRef RawTrainingStepFunctions;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MISSINGZEROGRADCHECK_H
