//===--- EvalModeMissingCheck.h - torch-tidy --------------------*- C++ -*-===//

#ifndef TORCH_TIDY_EVALMODEMISSINGCHECK_H
#define TORCH_TIDY_EVALMODEMISSINGCHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags a forward, in evaluation, of a module with Dropout or BatchNorm
/// layers that is in training mode on some path; and a forward whose output
/// reaches backward() on such a module in evaluation mode on every path.
///
/// For the user-facing documentation see:
/// docs/checks/torch-eval-mode-missing.md
class EvalModeMissingCheck : public ModelCheck {
public:
  EvalModeMissingCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void report(const Violation &V, ProgramModel &Program) override;
  const StringRef RawEvaluationFunctions;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_EVALMODEMISSINGCHECK_H
