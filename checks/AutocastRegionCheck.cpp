//===--- AutocastRegionCheck.cpp - torch-tidy -----------------------------===//
//
// What it requires, of the autocast state (a path fact: switched on by a
// call, a helper or a guard's constructor, off or restored by a call or a
// guard's destructor) and of the loss (a value fact: a mean loss computed in
// a float16 region):
//  - a return, or a throw that leaves the function, does not leave on a
//    region that a call of this function switched on, when the function
//    switches autocast off elsewhere (it means to close it);
//  - a backward() runs with autocast off, and not on a float16 region's
//    unscaled loss. Where autocast is as the function found it, the callers
//    decide.
//
//===----------------------------------------------------------------------===//

#include "AutocastRegionCheck.h"
#include "api/Training.h"

namespace clang::tidy::torch {

namespace {

enum : unsigned {
  ExitFlag = 1,          // a return or a throw
  StartedHereFlag = 2,   // the region was switched on by a call here
  ClosesFlag = 4,        // the function switches autocast off elsewhere
};

class AutocastRegion : public Requirement {
public:
  llvm::StringRef name() const override { return "autocast-region"; }

  bool match(const Stmt &S, const FlowModel &M, const State &St,
             RequirementMatch &Out) const override {
    if (M.leavesFunction(S)) {
      const Stmt *Start = St.path().AutocastStart.first;
      Out.Flags = ExitFlag;
      if (Start && isa<CallExpr>(Start) && M.isInBody(Start))
        Out.Flags |= StartedHereFlag;
      if (M.closesAutocast())
        Out.Flags |= ClosesFlag;
      Out.What = isa<ReturnStmt>(S)      ? "returns"
                 : isa<CXXThrowExpr>(S) ? "throws"
                                        : "throws through a call";
      return true;
    }
    const auto *Call = dyn_cast<CallExpr>(&S);
    if (!Call || Call->isTypeDependent() ||
        !isBackwardCall(*Call, M.options()))
      return false;
    const Expr *Loss = memberCallObject(*Call);
    Out.Operands.push_back({Loss ? M.evaluate(Loss, St) : ValueFacts(), "",
                            Loss});
    Out.What = "backward()";
    return true;
  }

  Verdict judge(const RequirementMatch &M, const SiteContext &C) const override {
    AutocastState State = C.Path.Autocast;
    if (M.Flags & ExitFlag)
      return State == AutocastState::On && (M.Flags & StartedHereFlag) &&
                     (M.Flags & ClosesFlag)
                 ? Verdict::Violated
                 : Verdict::Holds;
    if (State == AutocastState::On)
      return Verdict::Violated;
    const ValueFacts &Loss = M.Operands[0].Facts;
    if (Loss.HalfAutocast.isValid())
      return Verdict::Violated;
    return State == AutocastState::Entry ? Verdict::Callers : Verdict::Holds;
  }
};

const AutocastRegion Instance;
const RequirementRegistration Registered(Instance);

} // namespace

AutocastRegionCheck::AutocastRegionCheck(StringRef Name,
                                         ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawAutocastGuardTypes(Options.get("AutocastGuardTypes", "")),
      RawBackwardFunctions(Options.get("BackwardFunctions", "")) {
  Kind = &Instance;
}

void AutocastRegionCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "AutocastGuardTypes", RawAutocastGuardTypes);
  Options.store(Opts, "BackwardFunctions", RawBackwardFunctions);
}

void AutocastRegionCheck::report(const Violation &V, ProgramModel &Program) {
  const PathFacts &Path = V.Context.Path;
  SourceLocation Start = Path.AutocastStart.second;
  if (V.Match.Flags & ExitFlag) {
    // One warning per region, at the switch (a macro's use site).
    if (!firstAt(Start))
      return;
    diag(Start, "autocast switched on here stays on when the function %0 "
                "below: autocast is thread-wide state, so everything after "
                "runs in reduced precision; switch it off on every path, or "
                "use a guard that restores it")
        << V.Match.What;
    diag(locationOf(V, /*InCallee=*/false), "the function %0 here with "
                                            "autocast on",
         DiagnosticIDs::Note)
        << V.Match.What;
    return;
  }
  SourceLocation Backward = locationOf(V, /*InCallee=*/true);
  if (!firstAt(Backward))
    return;
  if (Path.Autocast == AutocastState::On) {
    diag(Backward, "backward() runs inside an autocast region: PyTorch runs "
                   "the backward pass outside autocast; switch autocast off "
                   "before backward()");
    if (V.FromCallee)
      diag(locationOf(V, /*InCallee=*/false), "called here",
           DiagnosticIDs::Note);
    diag(Start, "autocast is switched on here", DiagnosticIDs::Note);
    return;
  }
  diag(Backward, "backward() of a loss computed in a float16 autocast "
                 "region with no loss scaling: small gradients underflow to "
                 "zero in float16; multiply the loss by a scale (and divide "
                 "the gradients by it) or use bfloat16");
  if (V.FromCallee)
    diag(locationOf(V, /*InCallee=*/false), "called here", DiagnosticIDs::Note);
  diag(V.Match.Operands[0].Facts.HalfAutocast,
       "the float16 region that computed the loss starts here",
       DiagnosticIDs::Note);
}

} // namespace clang::tidy::torch
