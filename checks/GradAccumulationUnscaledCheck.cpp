//===--- GradAccumulationUnscaledCheck.cpp - torch-tidy -------------------===//
//
// What it requires: a backward() of a mean loss (a value fact) does not
// add to its own gradients of an earlier iteration that no step applied and
// no reset cleared (path facts: the backward() calls not stepped, the steps
// run), unless some path rescales the gradients. The steps and backward()
// calls of callees come with their summaries; a backward() reached before
// any step or reset in its function is its callers' to judge.
//
//===----------------------------------------------------------------------===//

#include "GradAccumulationUnscaledCheck.h"
#include "api/Training.h"
#include "clang/Lex/Lexer.h"

namespace clang::tidy::torch {

namespace {

class ScaledAccumulation : public Requirement {
public:
  llvm::StringRef name() const override { return "accumulation-scaled"; }

  bool match(const Stmt &S, const FlowModel &M, const State &St,
             RequirementMatch &Out) const override {
    const auto *Call = dyn_cast<CallExpr>(&S);
    if (!Call || Call->isTypeDependent() ||
        !isBackwardCall(*Call, M.options()))
      return false;
    const Expr *Loss = memberCallObject(*Call);
    if (!Loss)
      return false;
    Out.Operands.push_back({M.evaluate(Loss, St), "", Loss});
    Out.What = "backward()";
    return true;
  }

  Verdict judge(const RequirementMatch &M, const SiteContext &C) const override {
    const ValueFacts &Loss = M.Operands[0].Facts;
    bool LossFromCallers =
        Loss.MeanLoss == Tri::Unknown && isCallerEntry(Loss.Graph);
    if ((Loss.MeanLoss != Tri::Yes && !LossFromCallers) ||
        C.Path.GradientsRescaled)
      return Verdict::Holds;
    // Its own gradients of an earlier iteration are still there.
    SourceLocation Here =
        C.At ? cast<Expr>(C.At)->getExprLoc() : SourceLocation();
    // Left unapplied by a branch on a counter: accumulation by design.
    bool Accumulates =
        Here.isValid() && !C.Path.StepsRun.empty() &&
        llvm::any_of(C.Path.BackwardsCounted,
                     [&](const auto &B) { return B.second == Here; });
    if (Accumulates)
      return LossFromCallers ? Verdict::Callers : Verdict::Violated;
    return C.Path.GradientsSettledSinceEntry ? Verdict::Holds
                                             : Verdict::Callers;
  }
};

const ScaledAccumulation Instance;
const RequirementRegistration Registered(Instance);

} // namespace

GradAccumulationUnscaledCheck::GradAccumulationUnscaledCheck(
    StringRef Name, ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawZeroGradFunctions(Options.get("ZeroGradFunctions", "")),
      RawTrainingStepFunctions(Options.get("TrainingStepFunctions", "")) {
  Kind = &Instance;
}

void GradAccumulationUnscaledCheck::storeOptions(
    ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ZeroGradFunctions", RawZeroGradFunctions);
  Options.store(Opts, "TrainingStepFunctions", RawTrainingStepFunctions);
}

void GradAccumulationUnscaledCheck::report(const Violation &V,
                                           ProgramModel &Program) {
  ASTContext &Ctx = Program.context();
  const SourceManager &SM = Ctx.getSourceManager();
  SourceLocation Backward = locationOf(V, /*InCallee=*/true);
  if (V.Context.Path.StepsRun.empty() || !firstAt(Backward))
    return;
  // For the note and the count: the first step after the backward() in
  // source order (the loop's own), else the first.
  SourceLocation Here = locationOf(V, /*InCallee=*/false);
  const auto *Step = llvm::min_element(
      V.Context.Path.StepsRun, [&](const auto &A, const auto &B) {
        bool AAfter = SM.isBeforeInTranslationUnit(Here, A.second);
        if (AAfter != SM.isBeforeInTranslationUnit(Here, B.second))
          return AAfter;
        return SM.isBeforeInTranslationUnit(A.second, B.second);
      });
  diag(Backward, "backward() of a mean loss adds its gradients over several "
                 "iterations before one step(): the update is as many times "
                 "too large; divide the loss by the number of accumulated "
                 "steps");
  if (V.FromCallee)
    diag(locationOf(V, /*InCallee=*/false), "called here",
         DiagnosticIDs::Note);
  // At the statement of this function that runs it (a step, or a call).
  DiagnosticBuilder Note = diag(
      cast<Expr>(Step->first)->getExprLoc(), "the step() runs only on some iterations; the gradients "
                    "of the others add up until it does",
      DiagnosticIDs::Note);
  // The fix (unsafe: it changes what is trained): `(loss / N).backward()`
  // with the step's `% N`, in the function that holds both.
  const auto *Call = dyn_cast_or_null<CallExpr>(V.FromCallee ? nullptr : V.Site);
  const Expr *Loss = Call ? memberCallObject(*Call) : nullptr;
  if (!Loss || !isOptimizerStepCall(*cast<CallExpr>(Step->first),
                                    Program.options()))
    return;
  std::string N = accumulationCount(*Step->first, Ctx);
  CharSourceRange Range = CharSourceRange::getTokenRange(
      Loss->IgnoreImplicit()->getSourceRange());
  if (N.empty() || Range.getBegin().isMacroID() || Range.getEnd().isMacroID())
    return;
  Note << FixItHint::CreateReplacement(
      Range, "(" +
                 Lexer::getSourceText(Range, SM, Ctx.getLangOpts()).str() +
                 " / " + N + ")");
}

} // namespace clang::tidy::torch
