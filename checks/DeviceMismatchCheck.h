//===--- DeviceMismatchCheck.h - torch-tidy ---------------------*- C++ -*-===//

#ifndef TORCH_TIDY_DEVICEMISMATCHCHECK_H
#define TORCH_TIDY_DEVICEMISMATCHCHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

struct InstantiatedRequirement;

/// Flags a module call, operator or multi-tensor function whose operands the
/// flow analysis proves to be on different devices, and a call of a user
/// function that combines arguments proven to be on different devices.
///
/// For the user-facing documentation see:
/// docs/checks/torch-device-mismatch.md
class DeviceMismatchCheck : public ModelCheck {
public:
  DeviceMismatchCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void checkBody(const FunctionDecl &Function,
                 const TensorFlowAnalysis &Analysis,
                 ProgramModel &Program) override;
  struct Operand {
    std::string Name;
    ValueFacts Facts;
  };
  /// Reports the two operands of one operation when they conflict; true
  /// when it did.
  bool report(SourceLocation Loc, StringRef What, const Operand &First,
              const Operand &Second, bool IsModuleCall, bool AllowsZeroDimCPU,
              const ASTContext &Ctx);
  void checkRequirement(const CallExpr &Call, const InstantiatedRequirement &R,
                        ProgramModel &Program);

  const StringRef RawExtraFactories;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_DEVICEMISMATCHCHECK_H
