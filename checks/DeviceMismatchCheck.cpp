//===--- DeviceMismatchCheck.cpp - torch-tidy -----------------------------===//
//
// The requirement: the operands of a module call, an arithmetic operator or
// a multi-tensor LibTorch function share a device.
//
//===----------------------------------------------------------------------===//

#include "DeviceMismatchCheck.h"
#include "api/TorchMatchers.h"

namespace clang::tidy::torch {

namespace {

enum : unsigned { ModuleCallFlag = 1, ElementwiseFlag = 2 };

/// The pairs an operation requires on one device: the module with each
/// input, or every two tensors.
template <typename Fn> Verdict forEachPair(const RequirementMatch &M, Fn F) {
  const auto &Ops = M.Operands;
  bool Module = M.Flags & ModuleCallFlag;
  Verdict Result = Verdict::Holds;
  for (size_t I = 0; I < (Module ? std::min<size_t>(1, Ops.size()) : Ops.size()); ++I)
    for (size_t J = I + 1; J < Ops.size(); ++J) {
      Verdict V = F(Ops[I], Ops[J]);
      if (V == Verdict::Violated)
        return V;
      if (V == Verdict::Callers)
        Result = V;
    }
  return Result;
}

Verdict judgePair(const RequirementMatch &M, const Operand &A,
                  const Operand &B) {
  if ((M.Flags & ModuleCallFlag) && A.Facts.HasParameters == Tri::No)
    return Verdict::Holds; // a loss module has no device of its own
  return judgeSameDevice(A.Facts, B.Facts, M.Flags & ElementwiseFlag);
}

class SameDevice : public Requirement {
public:
  llvm::StringRef name() const override { return "same-device"; }
  bool operandsShareDevice() const override { return true; }

  bool match(const Stmt &S, const FlowModel &M, const State &St,
             RequirementMatch &Out) const override {
    DeviceOperation Op;
    if (!matchDeviceOperation(S, Op))
      return false;
    const ASTContext &Ctx = M.context();
    for (size_t I = 0; I < Op.Operands.size(); ++I) {
      const Expr *E = Op.Operands[I];
      bool IsModule = Op.IsModuleCall && I == 0;
      std::optional<ValueFacts> Facts =
          IsModule ? M.evaluate(E, St) : M.evaluateOperand(*E, St);
      if (!Facts)
        continue;
      Out.Operands.push_back({*Facts, quotedSource(E, Ctx, "operand"), E});
      // An output is written where the op computes, 0-dim or not.
      if (Op.InPlace && I == 0)
        Out.Operands.back().Facts.MinDims =
            std::max<uint8_t>(Out.Operands.back().Facts.MinDims, 1);
    }
    Out.What = Op.What;
    Out.Flags = (Op.IsModuleCall ? ModuleCallFlag : 0) |
                (Op.Elementwise ? ElementwiseFlag : 0);
    return Out.Operands.size() >= 2;
  }

  Verdict judge(const RequirementMatch &M, const SiteContext &) const override {
    return forEachPair(M, [&](const Operand &A, const Operand &B) {
      return judgePair(M, A, B);
    });
  }
};

const SameDevice Instance;
const RequirementRegistration Registered(Instance);

/// "; this crashes on a machine where 'device' is CUDA" for a symbolic
/// device against the CPU.
std::string onWhichMachine(const DeviceValue &A, const DeviceValue &B) {
  if (compareDevices(A, B) != DeviceConflict::OnAcceleratorMachine)
    return "";
  const DeviceValue &Symbolic = A.isSymbolic() ? A : B;
  return "; this crashes on a machine where " + Symbolic.describe() +
         " is CUDA";
}

} // namespace

DeviceMismatchCheck::DeviceMismatchCheck(StringRef Name,
                                         ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawExtraFactories(Options.get("ExtraFactories", "")) {
  Kind = &Instance;
}

void DeviceMismatchCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraFactories", RawExtraFactories);
}

void DeviceMismatchCheck::report(const Violation &V, ProgramModel &Program) {
  const ASTContext &Ctx = Program.context();
  // The first pair that conflicts: one warning per operation.
  const Operand *First = nullptr, *Second = nullptr;
  forEachPair(V.Match, [&](const Operand &A, const Operand &B) {
    Verdict Verdict = judgePair(V.Match, A, B);
    if (Verdict == Verdict::Violated && !First) {
      First = &A;
      Second = &B;
    }
    return Verdict;
  });
  SourceLocation Loc = locationOf(V, /*InCallee=*/false);
  if (!First || !firstAt(Loc))
    return;
  bool Module = V.Match.Flags & ModuleCallFlag;
  const DeviceValue &A = First->Facts.Device.Value;
  const DeviceValue &B = Second->Facts.Device.Value;
  std::string NameA = nameOf(*First, Ctx, "operand");
  std::string NameB = nameOf(*Second, Ctx, "operand");
  std::string OnA = A.describe() + fromWhere(First->Facts.Device, Ctx);
  std::string OnB = B.describe() + fromWhere(Second->Facts.Device, Ctx);
  std::string Message;
  if (!V.FromCallee)
    Message = Module ? "module " + NameA + " has its parameters on " + OnA +
                           " but is called with " + NameB + " on " + OnB
                     : V.Match.What + " combines " + NameA + " on " + OnA +
                           " with " + NameB + " on " + OnB;
  else {
    std::string Callee =
        V.Callee ? Program.calleeName(*V.Callee) : std::string("the callee");
    Message = Module ? Callee + " calls module " + NameA + ", on " + OnA +
                           ", with " + NameB + " on " + OnB
                     : Callee + " combines " + NameA + " on " + OnA + " with " +
                           NameB + " on " + OnB + " in " + V.Match.What;
  }
  diag(Loc, "%0") << Message + onWhichMachine(A, B);
  for (const Operand *O : {First, Second}) {
    std::string Name = nameOf(*O, Ctx, "operand");
    noteFact(O->Facts.Device, Name, "%0 is on %1 from here",
             O->Facts.Device.Value.describe());
  }
  noteIntoCallee(V, Module ? "the module is called here"
                           : "%0 combines them here");
}

} // namespace clang::tidy::torch
