//===--- TensorCalls.cpp - torch-tidy -------------------------------------===//
//
// TensorModel at calls: what a call does to the tracked state, through the
// callee's summary when it is a user function, and how a summary's facts,
// written in the callee's terms, become facts of the caller.
//
//===----------------------------------------------------------------------===//

#include "ProgramModel.h"
#include "TensorModel.h"
#include "api/TorchMatchers.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

const Expr *TensorModel::argumentFor(const CallExpr &Call,
                                     const ParmVarDecl &P) {
  const auto *Callee =
      dyn_cast_or_null<FunctionDecl>(P.getDeclContext());
  if (!Callee)
    return nullptr;
  unsigned Index = P.getFunctionScopeIndex();
  // `obj(args)` on a lambda or functor passes the object first.
  unsigned Offset = isa<CXXOperatorCallExpr>(Call) && isa<CXXMethodDecl>(Callee);
  if (Index + Offset >= Call.getNumArgs())
    return nullptr;
  const Expr *Arg = Call.getArg(Index + Offset);
  return isa<CXXDefaultArgExpr>(Arg) ? nullptr : Arg;
}

template <typename T>
Sourced<T> TensorModel::throughCall(const Sourced<T> &InCallee,
                                    const CallExpr &Call) const {
  Sourced<T> R = InCallee;
  R.Param = nullptr;
  if (Program)
    if (const FunctionDecl *Callee = Call.getDirectCallee())
      R.Via = Program->step(Call.getExprLoc(), Program->calleeName(*Callee),
                            InCallee.Via);
  return R;
}

Sourced<DeviceValue>
TensorModel::instantiate(const Sourced<DeviceValue> &InCallee,
                         const CallExpr &Call, const TensorState &S) const {
  if (InCallee.Param) {
    const Expr *Arg = argumentFor(Call, *InCallee.Param);
    return Arg ? evaluate(Arg, S).Device : Sourced<DeviceValue>();
  }
  const DeviceValue &V = InCallee.Value;
  // "Whatever the callee's device parameter holds": the argument's device.
  if (V.isSymbolic())
    if (const auto *P = dyn_cast_or_null<ParmVarDecl>(V.holder()))
      if (const auto *Callee = Call.getDirectCallee();
          Callee && isa<FunctionDecl>(P->getDeclContext()) &&
          cast<FunctionDecl>(P->getDeclContext())->getCanonicalDecl() ==
              Callee->getCanonicalDecl()) {
        // The value is the argument's; the callee is where it was applied.
        const Expr *Arg = argumentFor(Call, *P);
        DeviceValue Passed =
            Arg ? evaluateDeviceSpec(Arg, S).Value : DeviceValue::unknown();
        if (!Passed.isKnown())
          return {};
        Sourced<DeviceValue> R = throughCall(InCallee, Call);
        R.Value = Passed;
        return R;
      }
  if (!V.isKnown())
    return {};
  return throughCall(InCallee, Call);
}

ValueFacts TensorModel::instantiate(const ValueFacts &InCallee,
                                    const CallExpr &Call,
                                    const FunctionSummary &,
                                    const TensorState &S) const {
  ValueFacts R = InCallee;
  R.Device = instantiate(InCallee.Device, Call, S);
  auto Substitute = [&](const auto &Fact, auto Member) {
    using SourcedT = std::decay_t<decltype(Fact)>;
    if (Fact.Param) {
      const Expr *Arg = argumentFor(Call, *Fact.Param);
      return Arg ? evaluate(Arg, S).*Member : SourcedT();
    }
    return Fact.Value == SourcedT().Value ? SourcedT()
                                          : throughCall(Fact, Call);
  };
  R.Pin = Substitute(InCallee.Pin, &ValueFacts::Pin);
  R.Graph = Substitute(InCallee.Graph, &ValueFacts::Graph);
  return R;
}

/// The object a member call runs on, as a key base: `this` (null Base) or a
/// local variable; nullopt when it is neither.
static std::optional<const ValueDecl *>
objectBase(const CallExpr &Call, const TensorModel &Model) {
  const auto *Member = dyn_cast<CXXMemberCallExpr>(&Call);
  if (!Member)
    return std::nullopt;
  const Expr *Object = Member->getImplicitObjectArgument();
  if (!Object)
    return std::nullopt;
  Object = Object->IgnoreParenImpCasts();
  if (isa<CXXThisExpr>(Object))
    return nullptr;
  ValueKey Key = Model.keyOf(Object);
  if (Key && Key.Base && !Key.Field)
    return Key.Base;
  return std::nullopt;
}

void TensorModel::applySummaryEffects(const CallExpr &Call,
                                      const FunctionSummary &Summary,
                                      TensorState &State) const {
  // The facts after the call are computed from the state before it.
  const TensorState Before = State;
  for (const SummaryEffect &Effect : Summary.Effects) {
    ValueKey Key;
    if (Effect.Param) {
      if (const Expr *Arg = argumentFor(Call, *Effect.Param))
        Key = keyOf(stripConversions(Arg));
    } else if (std::optional<const ValueDecl *> Base =
                   objectBase(Call, *this)) {
      Key = {*Base, Effect.Field};
    }
    if (!Key)
      continue;
    ValueFacts After = instantiate(Effect.Exit, Call, Summary, Before);
    // A module handle passed by value still names the caller's module.
    if (Effect.Param && isModuleHandleType(Effect.Param->getType())) {
      ValueFacts F = State.get(Key);
      F.Device = After.Device;
      After = F;
    }
    State.set(Key, After);
  }
}

void TensorModel::forgetOpaqueEffects(const CallExpr &Call,
                                      TensorState &State) const {
  const FunctionDecl *FD = Call.getDirectCallee();
  unsigned Offset = FD && isa<CXXOperatorCallExpr>(Call) &&
                    isa<CXXMethodDecl>(FD);
  for (unsigned I = Offset; I < Call.getNumArgs(); ++I) {
    const Expr *Arg = stripConversions(Call.getArg(I));
    ValueKey Key = keyOf(Arg);
    if (!Key)
      continue;
    // Arguments passed by non-const reference may change; a module handle
    // may be moved whatever way it is passed, unless to LibTorch.
    bool MayChange = false;
    if (FD && I - Offset < FD->getNumParams()) {
      QualType PT = FD->getParamDecl(I - Offset)->getType();
      MayChange =
          PT->isReferenceType() && !PT.getNonReferenceType().isConstQualified();
    }
    if (!MayChange && isModuleHandleType(Arg->getType()) &&
        !(FD && isLibraryFunction(*FD)))
      MayChange = true;
    if (!MayChange)
      continue;
    if (Key.Base && !Key.Field)
      State.forgetObject(Key.Base);
    State.forget(Key);
  }
  // A non-const method of the user's whose body is not known may change
  // every member of its object.
  const auto *MD = dyn_cast_or_null<CXXMethodDecl>(FD);
  if (!MD || MD->isConst() || MD->isStatic() || isLibraryFunction(*MD))
    return;
  if (std::optional<const ValueDecl *> Base = objectBase(Call, *this)) {
    if (*Base)
      State.forgetObject(*Base);
    else
      State.forgetMembers();
  }
}

bool TensorModel::isBlockingDeviceRead(const CallExpr &Call,
                                       const TensorState &S) const {
  llvm::StringRef Method = tensorMethodName(Call);
  if (Method != "item" && Method != "cpu" && Method != "to")
    return false;
  ValueFacts Object = evaluate(memberCallObject(Call), S);
  if (!Object.Device.Value.isCUDA())
    return false;
  if (Method == "item")
    return true;
  ValueFacts Result = evaluate(&Call, S);
  return Result.Device.Value.isCPU() && !Result.PendingDeviceToHostCopy;
}

void TensorModel::applyCallEffects(const CallExpr &Call,
                                   TensorState &State) const {
  if (Program && Program->callsClassUnderConstruction(Call))
    return;
  const FunctionSummary *Summary =
      Program ? Program->summaryForCall(Call) : nullptr;
  if (isSynchronizeCall(Call, Opts) || isBlockingDeviceRead(Call, State) ||
      (Summary && Summary->MaySynchronize))
    State.completePendingCopies();
  if (const Expr *Module = moduleToReceiver(Call)) {
    ValueKey Key = keyOf(Module);
    if (!Key)
      return;
    if (const Expr *DeviceArg = argumentForParameter(Call, "device")) {
      ValueFacts F = State.get(Key);
      F.Device = evaluateDeviceSpec(DeviceArg, State);
      F.Device.Origin = Call.getExprLoc();
      F.Device.Via = nullptr;
      State.set(Key, F);
    }
    return;
  }
  llvm::StringRef Method = tensorMethodName(Call);
  if (Method == "copy_") {
    ValueKey Key = keyOf(memberCallObject(Call));
    if (!Key)
      return;
    ValueFacts Dest = State.get(Key);
    ValueFacts Src = evaluate(Call.getArg(0), State);
    Dest.Graph = Src.Graph.Value == GraphState::InGraph ? Src.Graph : Dest.Graph;
    Dest.PendingDeviceToHostCopy = nullptr;
    if (Dest.Device.Value.isCPU() && Src.Device.Value.mayBeCUDA())
      if (std::optional<bool> NB =
              evaluateBool(argumentForParameter(Call, "non_blocking"), State))
        if (*NB)
          Dest.PendingDeviceToHostCopy = &Call;
    State.set(Key, Dest);
    return;
  }
  if (Method == "detach_" || Method == "requires_grad_") {
    ValueKey Key = keyOf(memberCallObject(Call));
    ValueFacts F = State.get(Key);
    F.Graph = {Method == "detach_" ? GraphState::NoGraph : GraphState::Unknown,
               Call.getExprLoc()};
    State.set(Key, F);
    return;
  }
  if (!Method.empty())
    return;
  if (Summary) {
    applySummaryEffects(Call, *Summary, State);
    return;
  }
  forgetOpaqueEffects(Call, State);
}

void TensorModel::initializeMember(const CXXCtorInitializer &Init,
                                   TensorState &State) const {
  const FieldDecl *Field = Init.getMember();
  if (!Field || !Init.getInit())
    return;
  const Expr *Value = Init.getInit();
  if (const auto *Default = dyn_cast<CXXDefaultInitExpr>(Value))
    Value = Default->getExpr();
  // `Net net_;` default-constructs; `model_()` too.
  const Expr *Stripped = Value->IgnoreImplicit();
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(Stripped);
      Construct && Construct->getNumArgs() == 0)
    Value = nullptr;
  assign({nullptr, Field}, Field->getType(), Value,
         Value ? Value->getExprLoc() : Init.getSourceLocation(), State);
}

} // namespace clang::tidy::torch
