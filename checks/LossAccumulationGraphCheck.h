//===--- LossAccumulationGraphCheck.h - torch-tidy --------------*- C++ -*-===//

#ifndef TORCH_TIDY_LOSSACCUMULATIONGRAPHCHECK_H
#define TORCH_TIDY_LOSSACCUMULATIONGRAPHCHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags a tensor attached to an autograd graph (a module output, a loss,
/// arithmetic on them, a value that reaches backward(), outside any no-grad
/// guard) accumulated into storage that still holds the graph of an earlier
/// iteration: `total += loss`, `total = total + loss`,
/// `losses.push_back(loss)`, in a struct field, a container element, a
/// member, or a caller's variable.
///
/// For the user-facing documentation see:
/// docs/checks/torch-loss-accumulation-graph.md
class LossAccumulationGraphCheck : public ModelCheck {
public:
  LossAccumulationGraphCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void report(const Violation &V, ProgramModel &Program) override;
  const StringRef RawBackwardFunctions;
  const StringRef RawAccumulatingFunctions;
  const StringRef RawGuardTypes;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_LOSSACCUMULATIONGRAPHCHECK_H
