//===--- SummaryBuild.cpp - torch-tidy ------------------------------------===//
//
// ProgramModel::buildSummary: what a function's analysis proves in its entry
// terms (returned value and parts, effects on what the caller sees, clobbers,
// grad mode, training calls), with the obligations judging lifted.
//
//===----------------------------------------------------------------------===//

#include "FlowAnalysis.h"
#include "ProgramModel.h"
#include "api/StdLibrary.h"
#include "api/Training.h"
#include "api/TorchMatchers.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

//===--- Summaries ---------------------------------------------------------===//

/// Whether the caller of \p F can see a change of \p L.
static bool isVisibleToCaller(const Location &L, const FunctionDecl &F) {
  switch (L.Kind) {
  case Location::This:
  case Location::Global:
    return true;
  case Location::Local: {
    const auto *P = dyn_cast_or_null<ParmVarDecl>(L.Root);
    // Another function's variable that this one does not capture, which a
    // lambda captured where it was written and this function ran: that
    // function's callers know it.
    if (!P && L.Root && L.Root->getDeclContext() != &F &&
        L.Root->getDeclContext()->isFunctionOrMethod() &&
        !llvm::is_contained(capturedVariables(F), L.Root))
      return true;
    if (!P) {
      // A variable a lambda captures by reference, or a module handle it
      // captures by copy (which names the same module).
      const auto *Method = dyn_cast<CXXMethodDecl>(&F);
      if (!Method || !Method->getParent()->isLambda())
        return false;
      for (const LambdaCapture &C : Method->getParent()->captures())
        if (C.capturesVariable() && C.getCapturedVar() == L.Root)
          return C.getCaptureKind() == LCK_ByRef ||
                 isModuleHandleType(L.Root->getType());
      return false;
    }
    QualType T = P->getType();
    if (isModuleHandleType(T))
      return true;
    return (T->isLValueReferenceType() || T->isPointerType()) &&
           !T->getPointeeType().isConstQualified();
  }
  default:
    return false;
  }
}

/// The caller's storage that \p Returned names: a member of `*this`, a
/// part of a parameter, a reference parameter; null for anything else.
static Location returnedStorage(const FunctionDecl &F, const FlowModel &M,
                                const Expr &Returned) {
  // `return batch.weight;` by value: a copy of that storage.
  const Expr *E = Returned.IgnoreImplicit();
  if (const auto *Copy = dyn_cast<CXXConstructExpr>(E);
      Copy && Copy->getConstructor()->isCopyOrMoveConstructor() &&
      Copy->getNumArgs() == 1)
    E = Copy->getArg(0)->IgnoreImplicit();
  Location L = M.locationOf(E);
  if (L.Kind == Location::This)
    return L;
  if (const auto *P = dyn_cast_or_null<ParmVarDecl>(L.Root);
      L.Kind == Location::Local && P && P->getDeclContext() == &F &&
      (L.Depth > 0 ? P->getType()->isReferenceType() ||
                         P->getType()->isPointerType()
                   : P->getType()->isReferenceType()))
    return L;
  return {};
}

/// A step of an optimizer that is a local object of \p F: it and the
/// gradients it applied end with the call, no caller's backward() adds to
/// them. (A lambda's captured optimizer outlives the lambda's call.)
static bool stepsLocalOptimizer(const Stmt &Step, const FunctionDecl &F) {
  const auto *Call = dyn_cast<CXXMemberCallExpr>(&Step);
  const auto *Ref =
      Call ? dyn_cast<DeclRefExpr>(
                 Call->getImplicitObjectArgument()->IgnoreParenImpCasts())
           : nullptr;
  const auto *Var = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
  return Var && Var->hasLocalStorage() && !isa<ParmVarDecl>(Var) &&
         Var->getDeclContext() == &F &&
         !Var->getType()->isReferenceType() &&
         !Var->getType()->isPointerType();
}

FunctionSummary ProgramModel::buildSummary(const FunctionDecl &F,
                                           const FlowAnalysis &A) {
  FunctionSummary S;
  S.Known = true;
  const FlowModel &M = A.model();
  bool SawReturn = false;
  std::vector<SummaryEffect> Returns;
  std::optional<Location> Storage;
  A.replay([&](const Stmt &St, const State &Before) {
    const auto *Ret = dyn_cast<ReturnStmt>(&St);
    if (!Ret || !Ret->getRetValue())
      return;
    Location Returned = returnedStorage(F, M, *Ret->getRetValue());
    Storage = !Storage || *Storage == Returned ? Returned : Location();
    // The returned value and its parts, as a local copy would hold them.
    State Copy = Before;
    Location Slot = Location::returned();
    const Expr *V = Ret->getRetValue();
    // `return ++seen_ % every_ == 0;`: its callers branch on a counter.
    S.CountsIterations |= testsCounter(V);
    M.assignReturned(*V, F.getReturnType(), Copy);

    llvm::SmallVector<SummaryEffect, 4> These;
    ValueFacts Whole = M.evaluate(V, Before);
    if (const ValueFacts *Assigned = Copy.lookup(Slot))
      Whole = *Assigned;
    These.push_back({Slot, Whole});
    for (const Location &Part : Copy.tree(Slot))
      if (Part != Slot)
        These.push_back({Part, Copy.get(Part)});
    if (!SawReturn) {
      Returns.assign(These.begin(), These.end());
    } else {
      // Join with what the other returns give, part by part.
      std::vector<SummaryEffect> Merged;
      for (const SummaryEffect &Old : Returns)
        for (const SummaryEffect &New : These)
          if (Old.Where == New.Where) {
            ValueFacts J = joinFacts(Old.Exit, New.Exit);
            if (!J.isUnknown())
              Merged.push_back({Old.Where, J});
          }
      Returns = std::move(Merged);
    }
    SawReturn = true;
  });
  if (Storage)
    S.ReturnedStorage = *Storage;
  // A device the callee keeps in a local is "whatever it returns".
  for (SummaryEffect &R : Returns) {
    if (R.Where.Depth == 0 && R.Exit.Device.Value.isSymbolic())
      if (const auto *Local = dyn_cast_or_null<VarDecl>(R.Exit.Device.Value.holder());
          Local && !isa<ParmVarDecl>(Local) && Local->hasLocalStorage())
        R.Exit.Device = {DeviceValue::symbolic(&F), R.Exit.Device.Origin};
    if (!R.Exit.isUnknown())
      S.Returns.push_back(R);
  }

  // Effects: what the exit state holds for the locations the caller sees
  // that differs from their entry.
  if (const State *Exit = A.exitState()) {
    const State &Entry = A.entryState();
    llvm::SmallVector<Location, 8> Seen;
    auto Collect = [&](const Location &L, const ValueFacts &) {
      if (isVisibleToCaller(L, F) && !llvm::is_contained(Seen, L))
        Seen.push_back(L);
    };
    Exit->forEach(Collect);
    Entry.forEach(Collect);
    llvm::sort(Seen);
    for (const Location &L : Seen) {
      ValueFacts After = Exit->get(L);
      if (After == Entry.get(L))
        continue;
      if (After.isUnknown())
        S.Clobbers.push_back(L);
      else
        S.Effects.push_back({L, After});
    }
    for (const Location &L : Exit->clobbered())
      if (isVisibleToCaller(L, F) && !llvm::is_contained(S.Clobbers, L))
        S.Clobbers.push_back(L);
    S.ClobbersModes = Exit->path().ModesClobbered;
    S.BackwardEntriesKnown = !Exit->path().BackpropagatedOther;
    S.BackwardEntries.assign(Exit->path().EntriesBackpropagated.begin(),
                             Exit->path().EntriesBackpropagated.end());
    if (Exit->path().Grad != GradMode::Entry)
      S.ExitGrad = Exit->path().Grad;
    const PathFacts &ExitPath = Exit->path();
    S.ResetsGradients = ExitPath.GradientsResetSinceEntry;
    S.SettlesGradients = ExitPath.GradientsSettledSinceEntry;
    S.RescalesGradients = ExitPath.GradientsRescaled;
    for (const auto &[Step, At] : ExitPath.StepsWithoutReset)
      if (!stepsLocalOptimizer(*Step, F)) {
        S.StepWithoutReset = At;
        break;
      }
    if (!ExitPath.StepsRun.empty())
      S.StepRun = ExitPath.StepsRun.front().second;
    if (!ExitPath.BackwardsNotStepped.empty())
      S.BackwardNotStepped = ExitPath.BackwardsNotStepped.front().second;
    S.CountsIterations |= ExitPath.CounterBranch;
    S.AutocastAtExit = ExitPath.Autocast;
    if (ExitPath.Autocast == AutocastState::AsParameter)
      S.AutocastParam = ExitPath.AutocastParam->getFunctionScopeIndex();
    S.AutocastHalf = ExitPath.AutocastHalf;
    S.AutocastHalfAsEntry = ExitPath.AutocastHalfAsEntry;
    S.OpensAutocast = A.model().opensAutocast();
    S.SetsCudaDtype = !ExitPath.CudaDtypeAsEntry;
    S.CudaDtypeHalf = ExitPath.CudaDtypeHalfWhereSet;
    S.KeepsEntryCudaDtype = ExitPath.CudaDtypeSomeEntry;
    S.SelectsCuda = Exit->path().CudaSelectedBefore ||
                    llvm::any_of(Exit->path().UncheckedCuda, [](const auto &U) {
                      return U.second != CudaGuard::Checked;
                    });
    for (const OomRecovery &R : Exit->recoveries())
      if (R.EmptyCache && !S.OomEmptyCache) {
        S.OomHandler = R.Handler;
        S.OomEmptyCache = R.EmptyCache;
      }
  }

  // Obligations the callers must judge, and the training the body does.
  judge(A, /*Lift=*/true, nullptr, &S.Obligations);
  A.replay([&](const Stmt &St, const State &Before) {
    // An exception out of it: a throw, or a call that may throw, that no
    // try block of its own catches.
    S.MayThrow |= !isa<ReturnStmt>(St) && A.model().leavesFunction(St);
    const auto *Call = dyn_cast<CallExpr>(&St);
    if (!Call)
      return;
    const FlowModel &M = A.model();
    if (S.Backward.isInvalid() &&
        M.callTrains(*Call, TrainingCall::Backward, Before))
      S.Backward = Call->getExprLoc();
    if (S.Step.isInvalid() && M.callTrains(*Call, TrainingCall::Step, Before))
      S.Step = Call->getExprLoc();
    if (!S.TrainsPerCall &&
        M.callTrains(*Call, TrainingCall::PerStep, Before) &&
        A.loopContext(*Call).Loop.isInvalid())
      S.TrainsPerCall = true;
    S.MayRunOpaqueBackward |= M.mayTrain(*Call, Before);
    if (ModuleCall Run; !S.RunsOwnLayers && M.runsModule(*Call, Run) &&
                        M.isOwnLayer(Run))
      S.RunsOwnLayers = true;
    if (isSynchronizeCall(*Call, options()))
      S.MaySynchronize = true;
    else if (const FunctionSummary *Inner = A.model().summaryAt(*Call, Before))
      S.MaySynchronize |= Inner->MaySynchronize;
  });
  // A whole training run (its backward passes and steps in its own loops)
  // rescales the gradients it computes itself, not those its caller left.
  if ((S.Backward.isValid() || S.Step.isValid()) && !S.TrainsPerCall)
    S.RescalesGradients = false;
  return S;
}
} // namespace clang::tidy::torch
