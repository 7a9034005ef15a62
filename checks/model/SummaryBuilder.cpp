//===--- SummaryBuilder.cpp - torch-tidy ----------------------------------===//

#include "SummaryBuilder.h"
#include "ProgramModel.h"
#include "TensorFlowAnalysis.h"
#include "api/TorchMatchers.h"
#include "model/TrainingLoop.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"

namespace clang::tidy::torch {

llvm::SmallVector<InstantiatedRequirement, 2>
requirementsAt(const CallExpr &Call, const TensorModel &Model,
               const TensorState &S) {
  llvm::SmallVector<InstantiatedRequirement, 2> Out;
  ProgramModel *Program = Model.program();
  const FunctionSummary *Summary =
      Program ? Program->summaryForCall(Call) : nullptr;
  if (!Summary)
    return Out;
  const ASTContext &Ctx = Model.context();
  // A parameter stands for the argument passed for it, whole.
  auto FromArgument = [&](const ParmVarDecl &P) {
    InstantiatedOperand R;
    R.Argument = TensorModel::argumentFor(Call, P);
    if (R.Argument) {
      R.Facts = Model.evaluate(R.Argument, S);
      R.Name = quotedSource(R.Argument, Ctx, "the argument");
    }
    return R;
  };
  auto Instantiate = [&](const RequiredOperand &Op) {
    if (Op.Device.Param)
      return FromArgument(*Op.Device.Param);
    InstantiatedOperand R;
    R.Facts.Device = Model.instantiate(Op.Device, Call, S);
    R.Facts.MayBeZeroDim = Op.MayBeZeroDim;
    R.Name = Op.Name;
    return R;
  };
  for (const Requirement &Req : Summary->Requirements) {
    InstantiatedRequirement I;
    I.Req = &Req;
    I.First = Req.Kind == Requirement::PinnedSource && Req.Source
                  ? FromArgument(*Req.Source)
                  : Instantiate(Req.First);
    I.Second = Instantiate(Req.Second);
    Out.push_back(std::move(I));
  }
  return Out;
}

namespace {

/// Whether a location is a parameter of the function or a member of `*this`
/// whose changes a caller sees.
bool isVisibleToCaller(const ParmVarDecl &P) {
  QualType T = P.getType();
  if (isModuleHandleType(T))
    return true;
  if (!T->isLValueReferenceType() ||
      T.getNonReferenceType().isConstQualified())
    return false;
  QualType V = T.getNonReferenceType();
  return isTensorType(V) || isDeviceType(V) || isTensorOptionsType(V);
}

class Builder {
public:
  Builder(const FunctionDecl &F, const TensorFlowAnalysis &A,
          ProgramModel &P)
      : F(F), A(A), P(P), M(A.model()), Ctx(P.context()) {}

  FunctionSummary build() {
    S.Known = true;
    bool SawReturn = false;
    A.replay([&](const Stmt &St, const TensorState &State) {
      if (const auto *Ret = dyn_cast<ReturnStmt>(&St)) {
        if (const Expr *V = Ret->getRetValue()) {
          ValueFacts R = M.evaluate(V, State);
          S.Return = SawReturn ? joinFacts(S.Return, R) : R;
          SawReturn = true;
        }
        return;
      }
      recordDeviceRequirements(St, State);
      recordCopyRequirement(St, State);
      if (const auto *Call = dyn_cast<CallExpr>(&St))
        propagateRequirements(*Call, State);
    });
    // A device the callee keeps in a local is "whatever it returns".
    if (S.Return.Device.Value.isSymbolic())
      if (const auto *Local = dyn_cast_or_null<VarDecl>(
              S.Return.Device.Value.holder());
          Local && !isa<ParmVarDecl>(Local) && Local->hasLocalStorage())
        S.Return.Device = {DeviceValue::symbolic(&F), S.Return.Device.Origin};
    collectEffects();
    collectFlags();
    return std::move(S);
  }

private:
  RequiredOperand operand(const Expr *E, const ValueFacts &Facts) {
    return {Facts.Device, quotedSource(E, Ctx, "operand"), Facts.MayBeZeroDim};
  }

  /// Two operands the callee combines, at least one of them a parameter's
  /// device, and not already a conflict here.
  static bool needsCaller(const ValueFacts &A, const ValueFacts &B) {
    if (!A.Device.Param && !B.Device.Param)
      return false;
    if (A.Device.Param && B.Device.Param)
      return A.Device.Param != B.Device.Param;
    const ValueFacts &Known = A.Device.Param ? B : A;
    return Known.Device.Value.isKnown();
  }

  void addRequirement(Requirement R) {
    for (const Requirement &Existing : S.Requirements)
      if (Existing.Kind == R.Kind && Existing.At == R.At &&
          Existing.First.Device == R.First.Device &&
          Existing.Second.Device == R.Second.Device)
        return;
    S.Requirements.push_back(std::move(R));
  }

  void recordDeviceRequirements(const Stmt &St, const TensorState &State) {
    DeviceOperation Op;
    if (!matchDeviceOperation(St, Op))
      return;
    llvm::SmallVector<ValueFacts, 4> Facts;
    for (const Expr *O : Op.Operands)
      Facts.push_back(Op.IsModuleCall || isTensorType(O->getType())
                          ? M.evaluate(O, State)
                          : ValueFacts());
    size_t Last = Op.IsModuleCall ? 1 : Op.Operands.size();
    for (size_t I = 0; I < Last; ++I)
      for (size_t J = I + 1; J < Op.Operands.size(); ++J) {
        if (!Op.IsModuleCall && !isTensorType(Op.Operands[J]->getType()))
          continue;
        if (!needsCaller(Facts[I], Facts[J]))
          continue;
        Requirement R;
        R.Kind = Requirement::SameDevice;
        R.First = operand(Op.Operands[I], Facts[I]);
        R.Second = operand(Op.Operands[J], Facts[J]);
        R.What = Op.What;
        R.IsModuleCall = Op.IsModuleCall;
        R.AllowsZeroDimCPU = Op.Elementwise;
        R.At = isa<Expr>(St) ? cast<Expr>(St).getExprLoc() : St.getBeginLoc();
        addRequirement(std::move(R));
      }
  }

  void recordCopyRequirement(const Stmt &St, const TensorState &State) {
    TensorCopy Copy;
    if (!matchTensorCopy(St, Copy) || !Copy.Source || !Copy.Destination)
      return;
    std::optional<bool> NonBlocking = M.evaluateBool(
        argumentForParameter(*Copy.Call, "non_blocking"), State);
    if (!NonBlocking || !*NonBlocking)
      return;
    ValueFacts From = M.evaluate(Copy.Source, State);
    const ParmVarDecl *Source = From.Pin.Param;
    // The parameter's own memory, on the CPU or wherever it was.
    if (!Source || (From.Device.Param != Source && !From.Device.Value.isCPU()))
      return;
    ValueFacts To = M.evaluate(Copy.Destination, State);
    if (!To.Device.Value.mayBeCUDA() && !To.Device.Param)
      return;
    Requirement R;
    R.Kind = Requirement::PinnedSource;
    R.Source = Source;
    R.First = operand(Copy.Source, From);
    R.Second = {To.Device, "", true};
    R.At = Copy.Call->getExprLoc();
    addRequirement(std::move(R));
  }

  /// A callee's requirement that this function's parameters still decide
  /// becomes this function's, with the call on its path.
  void propagateRequirements(const CallExpr &Call, const TensorState &State) {
    const FunctionDecl *Callee = Call.getDirectCallee();
    if (!Callee)
      return;
    for (const InstantiatedRequirement &I : requirementsAt(Call, M, State)) {
      const Requirement &Inner = *I.Req;
      Requirement R = Inner;
      R.Via = P.step(Call.getExprLoc(), P.calleeName(*Callee), Inner.Via);
      R.First.Device = I.First.Facts.Device;
      R.Second.Device = I.Second.Facts.Device;
      R.First.MayBeZeroDim = I.First.Facts.MayBeZeroDim;
      R.Second.MayBeZeroDim = I.Second.Facts.MayBeZeroDim;
      if (!I.First.Name.empty())
        R.First.Name = I.First.Name;
      if (!I.Second.Name.empty())
        R.Second.Name = I.Second.Name;
      if (Inner.Kind == Requirement::PinnedSource) {
        const ParmVarDecl *Source = I.First.Facts.Pin.Param;
        if (!Source || (I.First.Facts.Device.Param != Source &&
                        !I.First.Facts.Device.Value.isCPU()))
          continue;
        if (!R.Second.Device.Value.mayBeCUDA() && !R.Second.Device.Param)
          continue;
        R.Source = Source;
        addRequirement(std::move(R));
        continue;
      }
      if (needsCaller(I.First.Facts, I.Second.Facts))
        addRequirement(std::move(R));
    }
  }

  void collectEffects() {
    const TensorState *Exit = A.exitState();
    if (!Exit)
      return;
    const TensorState &Entry = A.entryState();
    for (const ParmVarDecl *Param : F.parameters()) {
      if (!isVisibleToCaller(*Param))
        continue;
      ValueFacts After = Exit->get({Param, nullptr});
      if (After != Entry.get({Param, nullptr}))
        S.Effects.push_back({Param, nullptr, After});
    }
    const auto *Method = dyn_cast<CXXMethodDecl>(&F);
    if (!Method || Method->isStatic())
      return;
    llvm::SmallVector<const FieldDecl *, 4> Members;
    auto Collect = [&](ValueKey K, const ValueFacts &) {
      if (!K.Base && K.Field && !llvm::is_contained(Members, K.Field))
        Members.push_back(K.Field);
    };
    Exit->forEach(Collect);
    Entry.forEach(Collect);
    llvm::sort(Members, [](const FieldDecl *A, const FieldDecl *B) {
      return A->getLocation().getRawEncoding() <
             B->getLocation().getRawEncoding();
    });
    for (const FieldDecl *Field : Members) {
      ValueFacts After = Exit->get({nullptr, Field});
      if (After != Entry.get({nullptr, Field}))
        S.Effects.push_back({nullptr, Field, After});
    }
  }

  void collectFlags() {
    const Stmt *Body = F.getBody();
    if (!Body)
      return;
    if (const CallExpr *B = findTrainingCall(*Body, P, TrainingCall::Backward))
      S.Backward = B->getExprLoc();
    if (const CallExpr *St = findTrainingCall(*Body, P, TrainingCall::Step))
      S.Step = St->getExprLoc();
    S.MayRunOpaqueBackward =
        S.Backward.isValid() || S.Step.isValid() || mayCallBackward(*Body, P);
    S.MaySynchronize = maySynchronize(*Body, P);
  }

  const FunctionDecl &F;
  const TensorFlowAnalysis &A;
  ProgramModel &P;
  const TensorModel &M;
  const ASTContext &Ctx;
  FunctionSummary S;
};

} // namespace

FunctionSummary buildSummary(const FunctionDecl &Function,
                             const TensorFlowAnalysis &Analysis,
                             ProgramModel &Program) {
  return Builder(Function, Analysis, Program).build();
}

} // namespace clang::tidy::torch
