//===--- DeviceMismatchCheck.h - torch-tidy ---------------------*- C++ -*-===//

#ifndef TORCH_TIDY_DEVICEMISMATCHCHECK_H
#define TORCH_TIDY_DEVICEMISMATCHCHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags a module call, operator or multi-tensor function whose operands are
/// proven to be on different devices, and a call of a user function that
/// combines arguments proven to be on different devices.
///
/// For the user-facing documentation see:
/// docs/checks/torch-device-mismatch.md
class DeviceMismatchCheck : public ModelCheck {
public:
  DeviceMismatchCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void report(const Violation &V, ProgramModel &Program) override;
  const StringRef RawExtraFactories;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_DEVICEMISMATCHCHECK_H
