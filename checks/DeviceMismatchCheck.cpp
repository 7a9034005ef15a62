//===--- DeviceMismatchCheck.cpp - torch-tidy -----------------------------===//

#include "DeviceMismatchCheck.h"
#include "model/SummaryBuilder.h"
#include "api/TorchMatchers.h"

namespace clang::tidy::torch {

DeviceMismatchCheck::DeviceMismatchCheck(StringRef Name,
                                         ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawExtraFactories(Options.get("ExtraFactories", "")) {
  ApiOptions.ExtraFactories = parseNameList(RawExtraFactories);
}

void DeviceMismatchCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraFactories", RawExtraFactories);
}

/// The conflict between two operands, or None when there is none to report:
/// element-wise operators accept a 0-dim CPU tensor next to a CUDA one.
static DeviceConflict conflictOf(const ValueFacts &A, const ValueFacts &B,
                                 bool AllowsZeroDimCPU) {
  DeviceConflict C = compareDevices(A.Device.Value, B.Device.Value);
  if (C != DeviceConflict::None && AllowsZeroDimCPU &&
      ((A.Device.Value.isCPU() && A.MayBeZeroDim) ||
       (B.Device.Value.isCPU() && B.MayBeZeroDim)))
    return DeviceConflict::None;
  return C;
}

/// "; this crashes on a machine where 'device' is CUDA" for a symbolic
/// device against the CPU.
static std::string onWhichMachine(DeviceConflict C, const DeviceValue &A,
                                  const DeviceValue &B) {
  if (C != DeviceConflict::OnAcceleratorMachine)
    return "";
  const DeviceValue &Symbolic = A.isSymbolic() ? A : B;
  return "; this crashes on a machine where " + Symbolic.describe() +
         " is CUDA";
}

bool DeviceMismatchCheck::report(SourceLocation Loc, StringRef What,
                                 const Operand &First, const Operand &Second,
                                 bool IsModuleCall, bool AllowsZeroDimCPU,
                                 const ASTContext &Ctx) {
  DeviceConflict C = conflictOf(First.Facts, Second.Facts, AllowsZeroDimCPU);
  if (C == DeviceConflict::None)
    return false;
  if (!firstAt(Loc))
    return true;
  const DeviceValue &A = First.Facts.Device.Value;
  const DeviceValue &B = Second.Facts.Device.Value;
  std::string OnA = A.describe() + fromWhere(First.Facts.Device, Ctx);
  std::string OnB = B.describe() + fromWhere(Second.Facts.Device, Ctx);
  std::string Message =
      IsModuleCall ? "module " + First.Name + " has its parameters on " + OnA +
                         " but is called with " + Second.Name + " on " + OnB
                   : What.str() + " combines " + First.Name + " on " + OnA +
                         " with " + Second.Name + " on " + OnB;
  diag(Loc, "%0") << Message + onWhichMachine(C, A, B);
  for (const Operand *O : {&First, &Second})
    noteFact(O->Facts.Device, O->Name, "%0 is on %1 from here",
             O->Facts.Device.Value.describe());
  return true;
}

void DeviceMismatchCheck::checkRequirement(const CallExpr &Call,
                                           const InstantiatedRequirement &I,
                                           ProgramModel &Program) {
  const Requirement &R = *I.Req;
  if (R.Kind != Requirement::SameDevice)
    return;
  const ValueFacts &A = I.First.Facts, &B = I.Second.Facts;
  DeviceConflict C = conflictOf(A, B, R.AllowsZeroDimCPU);
  if (C == DeviceConflict::None || !firstAt(Call.getExprLoc()))
    return;
  const ASTContext &Ctx = Program.context();
  const FunctionDecl *Callee = Call.getDirectCallee();
  std::string Name = Callee ? Program.calleeName(*Callee) : "the callee";
  std::string OnA = A.Device.Value.describe() + fromWhere(A.Device, Ctx);
  std::string OnB = B.Device.Value.describe() + fromWhere(B.Device, Ctx);
  std::string Message =
      R.IsModuleCall
          ? Name + " calls module " + I.First.Name + ", on " + OnA +
                ", with " + I.Second.Name + " on " + OnB
          : Name + " combines " + I.First.Name + " on " + OnA + " with " +
                I.Second.Name + " on " + OnB + " in " + R.What;
  diag(Call.getExprLoc(), "%0")
      << Message + onWhichMachine(C, A.Device.Value, B.Device.Value);
  for (const InstantiatedOperand *O : {&I.First, &I.Second})
    noteFact(O->Facts.Device, O->Name, "%0 is on %1 from here",
             O->Facts.Device.Value.describe());
  // Then into the callee, call by call, to the operation.
  for (const CallStep *Step = R.Via; Step; Step = Step->Next)
    diag(Step->Call, "which calls %0 here", DiagnosticIDs::Note)
        << Step->Callee;
  diag(R.At,
       R.IsModuleCall ? "the module is called here" : "%0 combines them here",
       DiagnosticIDs::Note)
      << R.What;
}

void DeviceMismatchCheck::checkBody(const FunctionDecl &,
                                    const TensorFlowAnalysis &Analysis,
                                    ProgramModel &Program) {
  const TensorModel &Model = Analysis.model();
  const ASTContext &Ctx = Program.context();
  Analysis.replay([&](const Stmt &S, const TensorState &State) {
    if (const auto *Call = dyn_cast<CallExpr>(&S))
      for (const InstantiatedRequirement &I :
           requirementsAt(*Call, Model, State))
        checkRequirement(*Call, I, Program);
    DeviceOperation Op;
    if (!matchDeviceOperation(S, Op))
      return;
    SourceLocation Loc = cast<Expr>(S).getExprLoc();
    auto OperandAt = [&](size_t I) {
      const Expr *E = Op.Operands[I];
      bool Tracked = (Op.IsModuleCall && I == 0) || isTensorType(E->getType());
      return Operand{quotedSource(E, Ctx, "operand"),
                     Tracked ? Model.evaluate(E, State) : ValueFacts()};
    };
    if (Op.IsModuleCall) {
      Operand Module = OperandAt(0);
      for (size_t I = 1; I < Op.Operands.size(); ++I)
        if (isTensorType(Op.Operands[I]->getType()))
          report(Loc, "", Module, OperandAt(I), /*IsModuleCall=*/true,
                 /*AllowsZeroDimCPU=*/false, Ctx);
      return;
    }
    // Report the first conflicting pair only: one warning per operation.
    llvm::SmallVector<Operand, 4> Operands;
    for (size_t I = 0; I < Op.Operands.size(); ++I)
      Operands.push_back(OperandAt(I));
    for (size_t I = 0; I < Operands.size(); ++I)
      for (size_t J = I + 1; J < Operands.size(); ++J)
        if (report(Loc, Op.What, Operands[I], Operands[J],
                   /*IsModuleCall=*/false, Op.Elementwise, Ctx))
          return;
  });
}

} // namespace clang::tidy::torch
