//===--- TensorToDiscardedCheck.h - torch-tidy ------------------*- C++ -*-===//

#ifndef TORCH_TIDY_TENSORTODISCARDEDCHECK_H
#define TORCH_TIDY_TENSORTODISCARDEDCHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags a tensor conversion (`x.to(...)`, `x.cuda()`, `x.pin_memory()`, ...)
/// whose result is thrown away, written out or returned by a helper, a
/// lambda or either arm of a conditional: the conversion returns a new
/// tensor and leaves `x` where it was.
///
/// For the user-facing documentation see:
/// docs/checks/torch-tensor-to-discarded.md
class TensorToDiscardedCheck : public ModelCheck {
public:
  TensorToDiscardedCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void report(const Violation &V, ProgramModel &Program) override;
  /// Further `at::Tensor` methods, by plain name, that return a converted
  /// copy (read by the model, through modelConfigFor).
  const StringRef ExtraConversionMethods;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_TENSORTODISCARDEDCHECK_H
