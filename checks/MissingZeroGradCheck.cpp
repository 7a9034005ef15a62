//===--- MissingZeroGradCheck.cpp - torch-tidy ----------------------------===//
//
// What it requires: a backward() runs with no optimizer step pending whose
// gradients no reset cleared. The steps without a reset are a path fact
// (an optimizer step adds one, any gradient reset of any optimizer or module
// clears them, a call does what its summary says, an opaque call handed an
// optimizer or a module may reset); a backward() reached before any reset
// in its function is its callers' to judge with the steps they left.
//
//===----------------------------------------------------------------------===//

#include "MissingZeroGradCheck.h"
#include "api/Training.h"
#include "clang/Lex/Lexer.h"

namespace clang::tidy::torch {

namespace {

class BackwardAfterReset : public Requirement {
public:
  llvm::StringRef name() const override { return "backward-after-reset"; }

  bool match(const Stmt &S, const FlowModel &M, const State &,
             RequirementMatch &Out) const override {
    const auto *Call = dyn_cast<CallExpr>(&S);
    if (!Call || Call->isTypeDependent() ||
        !isBackwardCall(*Call, M.options()))
      return false;
    Out.What = "backward()";
    return true;
  }

  Verdict judge(const RequirementMatch &, const SiteContext &C) const override {
    if (!C.Path.StepsWithoutReset.empty())
      return Verdict::Violated;
    return C.Path.GradientsResetSinceEntry ? Verdict::Holds : Verdict::Callers;
  }
};

const BackwardAfterReset Instance;
const RequirementRegistration Registered(Instance);

/// The optimizer variable of `opt.step()` / `opt->step()` and how it is
/// reached (`.` or `->`); null for any other shape.
const DeclRefExpr *stepOptimizer(const Stmt &Step, bool &Arrow) {
  const auto *Call = dyn_cast<CXXMemberCallExpr>(&Step);
  const auto *Callee = Call ? dyn_cast<MemberExpr>(Call->getCallee()) : nullptr;
  if (!Callee)
    return nullptr;
  Arrow = Callee->isArrow();
  const Expr *Object = Callee->getBase()->IgnoreParenImpCasts();
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Object);
      Op && Op->getOperator() == OO_Arrow) { // a smart pointer's `->`
    Object = Op->getArg(0)->IgnoreParenImpCasts();
    Arrow = true;
  }
  return dyn_cast<DeclRefExpr>(Object);
}

} // namespace

MissingZeroGradCheck::MissingZeroGradCheck(StringRef Name,
                                           ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawZeroGradFunctions(Options.get("ZeroGradFunctions", "")),
      RawTrainingStepFunctions(Options.get("TrainingStepFunctions", "")) {
  Kind = &Instance;
}

void MissingZeroGradCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ZeroGradFunctions", RawZeroGradFunctions);
  Options.store(Opts, "TrainingStepFunctions", RawTrainingStepFunctions);
}

void MissingZeroGradCheck::report(const Violation &V, ProgramModel &Program) {
  const ASTContext &Ctx = Program.context();
  const SourceManager &SM = Ctx.getSourceManager();
  // One warning per step, at the step() itself (in a helper, when the step
  // is there): every step of the backward()'s own function that reaches
  // it, else the first in source order (what callers or a virtual call's
  // overrides left is a join of paths that may not run together).
  const FunctionDecl *Here = V.Analysis->function();
  auto InHere = [&](const Stmt *S) {
    return !V.FromCallee && Here && Here->getBody() &&
           isOptimizerStepCall(*cast<CallExpr>(S), Program.options()) &&
           SM.isPointWithin(S->getBeginLoc(), Here->getBody()->getBeginLoc(),
                            Here->getBody()->getEndLoc());
  };
  // Only the steps that may meet this backward() on a later iteration.
  auto Pending = V.Analysis->leftForLaterIteration(
      *V.Site, V.Context.Path.StepsWithoutReset);
  llvm::SmallVector<std::pair<const Stmt *, SourceLocation>, 2> Steps;
  for (const auto &Entry : Pending)
    if (InHere(Entry.first))
      Steps.push_back(Entry);
  if (Steps.empty())
    for (const auto &Entry : Pending)
      if (Steps.empty() || SM.isBeforeInTranslationUnit(Entry.second,
                                                        Steps[0].second))
        Steps.assign(1, Entry);
  llvm::sort(Steps, [&](const auto &A, const auto &B) {
    return SM.isBeforeInTranslationUnit(A.second, B.second);
  });
  // One fix per backward(): the first step's.
  for (size_t I = 0; I < Steps.size(); ++I)
    reportStep(V, *Steps[I].first, Steps[I].second, /*OfferFix=*/I == 0,
               Program);
}

void MissingZeroGradCheck::reportStep(const Violation &V, const Stmt &StepStmt,
                                      SourceLocation Loc, bool OfferFix,
                                      ProgramModel &Program) {
  const ASTContext &Ctx = Program.context();
  const SourceManager &SM = Ctx.getSourceManager();
  const Stmt *Step = &StepStmt;
  if (!firstAt(Loc))
    return;
  bool StepHere = isOptimizerStepCall(*cast<CallExpr>(Step), Program.options());
  diag(Loc, "optimizer step() with no gradient reset before the next "
            "backward(): LibTorch adds every backward() into .grad(), so each "
            "step applies the sum of all earlier gradients; call zero_grad() "
            "before backward()");
  if (!StepHere)
    diag(cast<CallExpr>(Step)->getExprLoc(), "the step is left by this call",
         DiagnosticIDs::Note);
  SourceLocation Backward = locationOf(V, /*InCallee=*/true);
  if (V.FromCallee)
    diag(locationOf(V, /*InCallee=*/false), "which calls backward() here",
         DiagnosticIDs::Note);
  DiagnosticBuilder Note = diag(
      Backward, "the next backward() adds to the gradients that step applied",
      DiagnosticIDs::Note);
  // The fix (unsafe: it changes what is trained): reset through the same
  // optimizer right before a backward() of the same function.
  bool Arrow = false;
  const DeclRefExpr *Var = stepOptimizer(*Step, Arrow);
  const Stmt *BackwardStmt = V.FromCallee ? nullptr : V.Site;
  if (!Var || !BackwardStmt || Backward.isMacroID() || !StepHere || !OfferFix)
    return;
  SourceLocation Start = BackwardStmt->getBeginLoc();
  std::string Indent = Lexer::getIndentationForLine(Start, SM).str();
  // Only at the start of a statement of its own, where a new line fits.
  if (Lexer::getIndentationForLine(Start, SM).size() + 1 !=
      SM.getSpellingColumnNumber(Start))
    return;
  Note << FixItHint::CreateInsertion(
      Start, Var->getDecl()->getName().str() + (Arrow ? "->" : ".") +
                 "zero_grad();\n" + Indent);
}

} // namespace clang::tidy::torch
