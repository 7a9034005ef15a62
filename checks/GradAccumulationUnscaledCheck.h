//===--- GradAccumulationUnscaledCheck.h - torch-tidy -----------*- C++ -*-===//

#ifndef TORCH_TIDY_GRADACCUMULATIONUNSCALEDCHECK_H
#define TORCH_TIDY_GRADACCUMULATIONUNSCALEDCHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags a backward() of a mean loss whose gradients add up over several
/// iterations before a step() that runs only on some of them, with the
/// loss never divided by the number of accumulated steps.
///
/// For the user-facing documentation see:
/// docs/checks/torch-grad-accumulation-unscaled.md
class GradAccumulationUnscaledCheck : public ModelCheck {
public:
  GradAccumulationUnscaledCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void report(const Violation &V, ProgramModel &Program) override;
  const StringRef RawZeroGradFunctions;
  const StringRef RawTrainingStepFunctions;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_GRADACCUMULATIONUNSCALEDCHECK_H
