//===--- CudaUnguardedCheck.cpp - torch-tidy ------------------------------===//

#include "CudaUnguardedCheck.h"
#include "api/TorchMatchers.h"

namespace clang::tidy::torch {

CudaUnguardedCheck::CudaUnguardedCheck(StringRef Name,
                                       ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      GuardFunctions(Options.get("GuardFunctions", "")),
      DeviceSelectorFunctions(Options.get("DeviceSelectorFunctions", "")) {}

void CudaUnguardedCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "GuardFunctions", GuardFunctions);
  Options.store(Opts, "DeviceSelectorFunctions", DeviceSelectorFunctions);
}

void CudaUnguardedCheck::checkFunction(const Decl &Owner,
                                       ProgramModel &Model) {
  Program = &Model;
  const FlowAnalysis *A = nullptr;
  const auto *Function = dyn_cast<FunctionDecl>(&Owner);
  // A template that nothing instantiates never runs.
  if (Function && Function->isDependentContext())
    return;
  if (Function)
    A = Model.analysis(*Function);
  else if (const auto *Global = dyn_cast<VarDecl>(&Owner))
    A = Model.initializerAnalysis(*Global);
  if (!A)
    return;
  // The selections still unchecked where the function ends, joined over its
  // ends: a CPU fallback on another branch has discharged the others.
  PathFacts End;
  bool First = true;
  for (const State &S : A->endStates()) {
    End = First ? S.path() : joinPaths(End, S.path());
    First = false;
  }
  const SourceManager &SM = Model.context().getSourceManager();
  const Expr *UselessCheck = nullptr;
  for (const Expr *Check : End.AvailabilityChecks)
    if (!UselessCheck || SM.isBeforeInTranslationUnit(Check->getBeginLoc(),
                                                      UselessCheck->getBeginLoc()))
      UselessCheck = Check;
  for (const auto &[Selection, Guard] : End.UncheckedCuda) {
    if (Guard != CudaGuard::Unguarded)
      continue;
    Use U;
    U.Selection = Selection;
    U.UselessCheck = UselessCheck;
    const Decl *Root = &Owner;
    if (Function) {
      const EntryContext &Context = Model.entryContext(*Function);
      const FunctionDecl *Start = Function;
      const Expr *Anchor = nullptr;
      if (Context.UncheckedCall && !Context.Root) {
        Start = Context.UncheckedPathStart;
        Anchor = Context.UncheckedPathCall;
      }
      // The callers, in other TUs, ran an unchecked selection first: the
      // path was reported there.
      if (Model.entryContext(*Start).Entry.path().CudaSelectedBefore)
        continue;
      Root = Start;
      U.Anchor = Anchor ? Anchor->getBeginLoc() : Selection->getBeginLoc();
      U.UncheckedCall = Context.UncheckedCall;
    } else {
      U.Anchor = Selection->getBeginLoc();
    }
    Paths[Root->getLocation().getRawEncoding()].push_back(U);
  }
}

void CudaUnguardedCheck::onEndOfTranslationUnit() {
  if (Program) {
    const SourceManager &SM = Program->context().getSourceManager();
    auto Where = [&](const Expr *E) {
      // `x.cuda()` is reported at `cuda`.
      if (const auto *Member = dyn_cast<CXXMemberCallExpr>(E))
        if (const auto *ME = dyn_cast<MemberExpr>(Member->getCallee()))
          return ME->getMemberLoc();
      return E->getBeginLoc();
    };
    for (auto &[Root, Uses] : Paths) {
      // In the order the path runs them: by where the root reaches them.
      llvm::stable_sort(Uses, [&](const Use &A, const Use &B) {
        if (A.Anchor != B.Anchor)
          return SM.isBeforeInTranslationUnit(A.Anchor, B.Anchor);
        return SM.isBeforeInTranslationUnit(A.Selection->getBeginLoc(),
                                            B.Selection->getBeginLoc());
      });
      llvm::SmallPtrSet<const Expr *, 8> Done;
      const Use *Reported = nullptr;
      for (const Use &U : Uses) {
        if (!Done.insert(U.Selection).second)
          continue;
        if (!Reported) {
          if (!firstAt(Where(U.Selection)))
            continue;
          Reported = &U;
          diag(Where(U.Selection),
               "CUDA device selected without checking "
               "torch::cuda::is_available(); this crashes on a machine "
               "without a working CUDA");
          if (U.UselessCheck)
            diag(SM.getExpansionLoc(U.UselessCheck->getBeginLoc()),
                 "an availability check here does not protect this use",
                 DiagnosticIDs::Note);
          if (U.UncheckedCall)
            diag(SM.getExpansionLoc(U.UncheckedCall->getBeginLoc()),
                 "reached from here without a check", DiagnosticIDs::Note);
          continue;
        }
        if (firstAt(Where(U.Selection)))
          diag(Where(U.Selection),
               "CUDA is selected here too, on the same path",
               DiagnosticIDs::Note);
      }
    }
  }
  Paths.clear();
  Program = nullptr;
  ModelCheck::onEndOfTranslationUnit();
}

} // namespace clang::tidy::torch
