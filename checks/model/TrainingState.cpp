//===--- TrainingState.cpp - torch-tidy -----------------------------------===//
//
// What a call does to the path facts of training: gradient resets,
// optimizer steps, backward passes and rescalings of the gradients, and the
// thread-wide autocast state and dtype. A call with a summary does what its
// summary says; a LibTorch call what its vocabulary says.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "ProgramModel.h"
#include "Summary.h"
#include "api/Autocast.h"
#include "api/Losses.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "api/Training.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/Analysis/Analyses/ExprMutationAnalyzer.h"

namespace clang::tidy::torch {

/// Whether an opaque call may reset gradients: it is handed an optimizer or
/// a module, as an argument or as its object.
static bool mayResetGradients(const CallExpr &Call) {
  auto Trains = [](const Expr *E) {
    QualType T = E->getType().getNonReferenceType();
    if (T->isPointerType())
      T = T->getPointeeType();
    return isModuleHandleType(T) || isOptimizerClass(T->getAsCXXRecordDecl());
  };
  if (const Expr *Object = memberCallObject(Call); Object && Trains(Object))
    return true;
  return llvm::any_of(Call.arguments(), Trains);
}

bool FlowModel::isPrivateObject(const Expr &Object) const {
  const auto *Ref = dyn_cast<DeclRefExpr>(Object.IgnoreParenImpCasts());
  const auto *Var = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
  return Var && Var->hasLocalStorage() && !isa<ParmVarDecl>(Var) &&
         !Var->getType()->isReferenceType() &&
         !Var->getType()->isPointerType() && !Escaped.contains(Var) &&
         !CapturedByReference.contains(Var);
}

void FlowModel::unknownCodeMayReset(PathFacts &Path) const {
  llvm::erase_if(Path.StepsWithoutReset, [&](const auto &Step) {
    const auto *StepCall = dyn_cast<CallExpr>(Step.first);
    const Expr *Optimizer = StepCall && isOptimizerStepCall(*StepCall, options())
                                ? memberCallObject(*StepCall)
                                : nullptr;
    return !Optimizer || !isPrivateObject(*Optimizer);
  });
}

bool FlowModel::testsCounterAt(const Expr *Cond, const State &S) const {
  if (testsCounter(Cond))
    return true;
  const Expr *E = Cond ? Cond->IgnoreParenImpCasts() : nullptr;
  for (const auto *Not = dyn_cast_or_null<UnaryOperator>(E);
       Not && Not->getOpcode() == UO_LNot;
       Not = dyn_cast<UnaryOperator>(E))
    E = Not->getSubExpr()->IgnoreParenImpCasts();
  const auto *Call = dyn_cast_or_null<CallExpr>(E);
  const FunctionSummary *Summary = Call ? summaryAt(*Call, S) : nullptr;
  return Summary && Summary->CountsIterations;
}

/// What a call leaves pending: where it is in the callee, when this TU has
/// it.
template <typename Pending>
static void leaveAt(const Stmt &Call, SourceLocation InCallee, Pending &Into) {
  if (InCallee.isInvalid())
    return;
  SourceLocation AtCall = isa<Expr>(Call) ? cast<Expr>(Call).getExprLoc()
                                          : Call.getBeginLoc();
  std::pair<const Stmt *, SourceLocation> Entry{
      &Call, InCallee.isFileID() ? InCallee : AtCall};
  if (!llvm::is_contained(Into, Entry))
    Into.push_back(Entry);
}

/// Every optimizer's gradients were reset.
static void resetGradients(PathFacts &Path) {
  Path.StepsWithoutReset.clear();
  Path.GradientsResetSinceEntry = true;
  Path.BackwardsNotStepped.clear();
  Path.BackwardsCounted.clear();
  Path.GradientsSettledSinceEntry = true;
}

/// The pending gradients were applied (a step) or dropped.
static void settleGradients(PathFacts &Path) {
  Path.BackwardsNotStepped.clear();
  Path.BackwardsCounted.clear();
  Path.GradientsSettledSinceEntry = true;
}

void FlowModel::transferGradientState(const CallExpr &Call,
                                      const FunctionSummary *Summary,
                                      State &St) const {
  PathFacts &Path = St.path();
  const FunctionDecl *FD = Call.getDirectCallee();
  // A callable whose contents are unknown (a hook the callers registered)
  // may reset the gradients of every optimizer it can reach: all but this
  // function's own, which no lambda captured and no pointer holds.
  if (const Expr *Holder = callableHolder(Call);
      Holder && !Summary && !evaluate(Holder, St).CallablesKnown)
    unknownCodeMayReset(Path);
  // An opaque call handed an optimizer or a module may reset or step.
  bool Opaque = !Summary && FD && !isLibraryFunction(*FD) &&
                mayResetGradients(Call);
  bool Step = isOptimizerStepCall(Call, options());
  if (isGradientReset(Call, options()) || Opaque)
    resetGradients(Path);
  if (Step)
    settleGradients(Path);
  Path.GradientsRescaled |= isGradientRescale(Call);
  if (Step) {
    leaveAt(Call, Call.getExprLoc(), Path.StepsWithoutReset);
    leaveAt(Call, Call.getExprLoc(), Path.StepsRun);
  } else if (Summary) {
    applyGradientSummary(Call, *Summary, Path);
  }
  if (isBackwardCall(Call, options()))
    leaveAt(Call, Call.getExprLoc(), Path.BackwardsNotStepped);
}

void FlowModel::applyGradientSummary(const Stmt &Call,
                                     const FunctionSummary &Summary,
                                     PathFacts &Path) {
  if (Summary.ResetsGradients)
    resetGradients(Path);
  if (Summary.SettlesGradients)
    settleGradients(Path);
  Path.GradientsRescaled |= Summary.RescalesGradients;
  leaveAt(Call, Summary.StepWithoutReset, Path.StepsWithoutReset);
  leaveAt(Call, Summary.StepRun, Path.StepsRun);
  leaveAt(Call, Summary.BackwardNotStepped, Path.BackwardsNotStepped);
  // A callee that branches on a counter (`step_if_ready()`): what is
  // pending after it is left so by design.
  if (Summary.CountsIterations)
    Path.countPendingBackwards();
}


const ParmVarDecl *FlowModel::unwrittenParameter(const Expr *E) const {
  const auto *Ref =
      E ? dyn_cast<DeclRefExpr>(E->IgnoreParenImpCasts()) : nullptr;
  const auto *P = Ref ? dyn_cast<ParmVarDecl>(Ref->getDecl()) : nullptr;
  if (!P || !Function || P->getDeclContext() != Function ||
      !P->getType()->isIntegralOrEnumerationType() || !Function->getBody())
    return nullptr;
  return ExprMutationAnalyzer(*Function->getBody(), Ctx).isMutated(P)
             ? nullptr
             : P;
}

const ParmVarDecl *FlowModel::unwrittenBoolParameter(const Expr *E) const {
  const ParmVarDecl *P = unwrittenParameter(E);
  return P && P->getType()->isBooleanType() ? P : nullptr;
}

ParameterTest FlowModel::parameterTest(const Expr *E) const {
  if (!E)
    return {};
  E = E->IgnoreParenImpCasts();
  if (const auto *Not = dyn_cast<UnaryOperator>(E);
      Not && Not->getOpcode() == UO_LNot) {
    ParameterTest T = parameterTest(Not->getSubExpr());
    T.Negated = !T.Negated;
    return T;
  }
  if (const auto *Cmp = dyn_cast<BinaryOperator>(E);
      Cmp && (Cmp->getOpcode() == BO_EQ || Cmp->getOpcode() == BO_NE)) {
    for (auto [Side, Other] : {std::pair(Cmp->getLHS(), Cmp->getRHS()),
                               std::pair(Cmp->getRHS(), Cmp->getLHS())}) {
      const ParmVarDecl *P = unwrittenParameter(Side);
      Expr::EvalResult R;
      if (P && !P->getType()->isBooleanType() && !Other->isValueDependent() &&
          Other->EvaluateAsInt(R, Ctx) &&
          R.Val.getInt().getSignificantBits() <= 63)
        return {P, R.Val.getInt().getExtValue(), Cmp->getOpcode() == BO_NE};
    }
    return {};
  }
  if (const ParmVarDecl *P = unwrittenBoolParameter(E))
    return {P, std::nullopt, false};
  // `const bool training = stage == Stage::Refit;`: its initialiser.
  if (const auto *Ref = dyn_cast<DeclRefExpr>(E))
    if (const auto *Local = dyn_cast<VarDecl>(Ref->getDecl());
        Local && !isa<ParmVarDecl>(Local) && Local->hasLocalStorage() &&
        !Local->getType()->isReferenceType() &&
        Local->getType().isConstQualified() && Local->getInit())
      return parameterTest(Local->getInit());
  return {};
}

/// Where a switch is, for notes: a macro's use site (`AMP_ON()`).
static SourceLocation switchLocation(const Expr &Call,
                                     const SourceManager &SM) {
  return SM.getExpansionLoc(Call.getExprLoc());
}

void FlowModel::transferAutocast(const CallExpr &Call,
                                 const FunctionSummary *Summary,
                                 State &St) const {
  PathFacts &Path = St.path();
  AutocastSwitch Switch = autocastSwitch(Call);
  // The CUDA spellings, or a device type that evaluates to CUDA.
  bool Cuda = Switch.DeviceType
                  ? evaluateDeviceSpec(Switch.DeviceType, St).Value.isCUDA()
                  : Switch.Backend.empty();
  if (Switch.What == AutocastSwitch::Enable) {
    std::optional<bool> On = evaluateBool(Switch.Value, St);
    if (!On) {
      // A saved state restored, or the function's own bool parameter.
      Path.AutocastParam = unwrittenBoolParameter(Switch.Value);
      Path.Autocast = Path.AutocastParam ? AutocastState::AsParameter
                                         : AutocastState::Unknown;
      // The dtype a region would have, for the callers that pass true.
      Path.AutocastHalf = Cuda && Path.CudaAutocastHalf == Tri::Yes;
      Path.AutocastHalfAsEntry = Cuda && Path.CudaDtypeAsEntry;
    } else if (*On) {
      OpensAutocast = true;
      Path.Autocast = AutocastState::On;
      Path.AutocastParam = nullptr;
      Path.AutocastIf.assign(Path.ConditionsHeld.begin(),
                             Path.ConditionsHeld.end());
      Path.AutocastStart = {&Call, switchLocation(Call, Ctx.getSourceManager())};
      Path.AutocastHalf = Cuda && Path.CudaAutocastHalf == Tri::Yes;
      Path.AutocastHalfAsEntry = Cuda && Path.CudaDtypeAsEntry;
    } else {
      Path.Autocast = AutocastState::Off;
      Path.AutocastParam = nullptr;
    }
    return;
  }
  if (Switch.What == AutocastSwitch::Dtype) {
    if (Cuda) {
      std::optional<bool> Half = namesHalf(Switch.Value);
      // A dtype the program holds (`dtype_`, a parameter a call decides).
      if (std::optional<int64_t> Known = evaluateScalar(Switch.Value, St).Known;
          !Half && Known)
        Half = dtypeValueIsHalf(stripConversions(Switch.Value)->getType(),
                                *Known);
      Path.setCudaDtype(!Half ? Tri::Unknown : *Half ? Tri::Yes : Tri::No);
    }
    return;
  }
  applyAutocastSummary(Call, Summary, St);
}

void FlowModel::applyAutocastSummary(const Expr &Call,
                                     const FunctionSummary *Summary,
                                     State &St) const {
  PathFacts &Path = St.path();
  if (Summary && Summary->SetsCudaDtype) {
    Tri Set = Summary->CudaDtypeHalf;
    if (!Summary->KeepsEntryCudaDtype) {
      Path.setCudaDtype(Set);
    } else {
      // Some paths of the callee leave the dtype this path holds.
      auto Either = [&](Tri Held) { return Held == Set ? Set : Tri::Unknown; };
      Path.CudaAutocastHalf = Either(Path.CudaAutocastHalf);
      Path.CudaDtypeHalfWhereSet =
          Path.CudaDtypeAsEntry ? Set : Either(Path.CudaDtypeHalfWhereSet);
      Path.CudaDtypeAsEntry = false;
    }
  }
  if (!Summary || Summary->AutocastAtExit == AutocastState::Entry)
    return;
  bool OpenedHere = Path.Autocast == AutocastState::On &&
                    isInBody(Path.AutocastStart.first);
  Path.Autocast = Summary->AutocastAtExit;
  Path.AutocastParam = nullptr;
  if (Path.Autocast == AutocastState::AsParameter) {
    // What the call passes for the parameter: true, false, or this
    // function's own parameter passed on.
    const auto *C = dyn_cast<CallExpr>(&Call);
    const Expr *Arg =
        C && static_cast<unsigned>(Summary->AutocastParam) < C->getNumArgs()
            ? C->getArg(Summary->AutocastParam)
            : nullptr;
    std::optional<bool> On = evaluateBool(Arg, St);
    Path.AutocastParam = On ? nullptr : unwrittenBoolParameter(Arg);
    Path.Autocast = On ? (*On ? AutocastState::On : AutocastState::Off)
                    : Path.AutocastParam ? AutocastState::AsParameter
                                         : AutocastState::Unknown;
  }
  // A helper that switches off, or back, a region opened here and opens
  // none of its own (`amp.exit()`, `amp::restore(saved)`) closes the
  // function's regions.
  ClosesAutocast |= OpenedHere && Path.Autocast != AutocastState::On &&
                    !Summary->OpensAutocast;
  OpensAutocast |= Summary->OpensAutocast || Path.Autocast == AutocastState::On;
  if (Path.Autocast == AutocastState::On) {
    // Switched on by this call, as far as this function goes (the notes
    // name the call of the helper, the guard's declaration).
    Path.AutocastStart = {&Call, switchLocation(Call, Ctx.getSourceManager())};
    Path.AutocastIf.assign(Path.ConditionsHeld.begin(),
                           Path.ConditionsHeld.end());
    Path.AutocastHalf =
        Summary->AutocastHalf || (Summary->AutocastHalfAsEntry &&
                                  Path.CudaAutocastHalf == Tri::Yes);
    Path.AutocastHalfAsEntry =
        Summary->AutocastHalfAsEntry && Path.CudaDtypeAsEntry;
  }
}

/// The class of the object that \p Start built: `T(...)`, `new T`,
/// `std::make_unique<T>(...)`.
static const CXXRecordDecl *builtRecord(const Stmt *Start) {
  const auto *E = dyn_cast_or_null<Expr>(Start);
  if (!E)
    return nullptr;
  if (const auto *New = dyn_cast<CXXNewExpr>(E->IgnoreImplicit()))
    return New->getAllocatedType()->getAsCXXRecordDecl();
  if (const auto *Call = dyn_cast<CallExpr>(E->IgnoreImplicit()))
    if (const CXXRecordDecl *Held = optionalEmplacedClass(*Call))
      return Held;
  QualType T = E->getType();
  if (isOwningPointer(T))
    T = ownedType(T);
  return T->getAsCXXRecordDecl();
}

void FlowModel::destroyOwnedObject(QualType Owner, State &St) const {
  // Only std::unique_ptr and std::optional: a shared object may live on in
  // a copy.
  const auto *Holder = Owner->getAsCXXRecordDecl();
  const CXXRecordDecl *RD = nullptr;
  if (isStdClass(Holder, "unique_ptr"))
    RD = ownedType(Owner)->getAsCXXRecordDecl();
  else if (const auto *Spec =
               dyn_cast_or_null<ClassTemplateSpecializationDecl>(Holder);
           Spec && isStdClass(Holder, "optional") &&
           Spec->getTemplateArgs().size() == 1 &&
           Spec->getTemplateArgs()[0].getKind() == TemplateArgument::Type)
    RD = Spec->getTemplateArgs()[0].getAsType()->getAsCXXRecordDecl();
  if (!RD)
    return;
  // The object whose construction switched autocast on, as for a local
  // guard (transferDestructor).
  const PathFacts &P = St.path();
  if (RD && P.Autocast == AutocastState::On &&
      builtRecord(P.AutocastStart.first) == RD)
    applyAutocastDestruction(*RD, St);
}

void FlowModel::applyAutocastDestruction(const CXXRecordDecl &RD,
                                         State &St) const {
  const CXXDestructorDecl *Dtor = RD.getDestructor();
  if (!Dtor)
    return;
  PathFacts &Path = St.path();
  auto Set = [&](AutocastState State) {
    Path.Autocast = State;
    Path.AutocastParam = nullptr;
    Path.AutocastStart = {nullptr, {}};
    Path.AutocastIf.clear();
  };
  if (Dtor->isUserProvided() && !Dtor->isDefined()) {
    // A guard's destructor defined elsewhere restores something.
    Set(AutocastState::Unknown);
  } else if (const FunctionSummary *Summary =
                 Dtor->isUserProvided() ? Program.summary(*Dtor) : nullptr;
             Summary && Summary->AutocastAtExit != AutocastState::Entry &&
             Summary->AutocastAtExit != AutocastState::On) {
    Set(Summary->AutocastAtExit);
  }
  // Then its members are destroyed, then its bases (`struct HalfRegion :
  // AmpGuard`, whose implicit destructor runs ~AmpGuard()).
  applyMemberAutocast(RD, /*At=*/nullptr, /*Destroy=*/true, St);
  if (RD.hasDefinition())
    for (const CXXBaseSpecifier &Base : RD.bases())
      if (const CXXRecordDecl *B = Base.getType()->getAsCXXRecordDecl();
          B && B->hasDefinition() && B != &RD)
        applyAutocastDestruction(*B, St);
}

void FlowModel::applyMemberAutocast(const CXXRecordDecl &RD, const Expr *At,
                                    bool Destroy, State &St) const {
  if (!RD.hasDefinition())
    return;
  for (const FieldDecl *Field : RD.fields()) {
    const CXXRecordDecl *Member = Field->getType()->getAsCXXRecordDecl();
    if (!Member || !Member->hasDefinition() || Member == &RD)
      continue;
    if (Destroy) {
      applyAutocastDestruction(*Member, St);
      continue;
    }
    for (const CXXConstructorDecl *Ctor : Member->ctors())
      if (Ctor->isDefaultConstructor() && Ctor->isUserProvided() &&
          Ctor->isDefined() && At)
        applyAutocastSummary(*At, Program.summary(*Ctor), St);
  }
}

void FlowModel::refineAutocast(const Expr *Cond, const Location &L, bool Taken,
                               State &St) const {
  PathFacts &Path = St.path();
  if (Taken) {
    if (!llvm::is_contained(Path.ConditionsHeld, Cond))
      Path.ConditionsHeld.push_back(Cond);
    return;
  }
  if (Path.Autocast == AutocastState::On &&
      llvm::any_of(Path.AutocastIf,
                   [&](const Expr *E) { return locationOf(E) == L; })) {
    Path.Autocast = AutocastState::Off;
    Path.AutocastParam = nullptr;
    Path.AutocastStart = {nullptr, {}};
    Path.AutocastIf.clear();
  }
}

} // namespace clang::tidy::torch
