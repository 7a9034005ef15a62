//===--- InferenceWithoutNoGradCheck.cpp - torch-tidy ---------------------===//
//
// What it watches for: a module forward that runs in a loop that never calls
// backward() (even through an opaque call) while autograd records (grad
// mode is a path fact: the RAII guards in scope, and every caller's), and
// whose output no backward reaches and nothing keeps beyond the function
// (a member, a global, a caller, an opaque call). A forward outside any
// loop of its own function is lifted to the callers: one that calls it in
// such a loop runs it there.
//
//===----------------------------------------------------------------------===//

#include "InferenceWithoutNoGradCheck.h"
#include "api/TorchMatchers.h"

namespace clang::tidy::torch {

namespace {

enum : unsigned { InsideModuleForward = 1 };

class ForwardWithoutGraphUse : public Requirement {
public:
  llvm::StringRef name() const override { return "forward-records-graph"; }

  bool match(const Stmt &S, const FlowModel &M, const State &St,
             RequirementMatch &Out) const override {
    const auto *Call = dyn_cast<CallExpr>(&S);
    ModuleCall MC;
    if (!Call || Call->isTypeDependent() || Call->getBeginLoc().isMacroID() ||
        !M.runsModule(*Call, MC))
      return false;
    Out.Operands.push_back({M.evaluate(MC.Module, St), "", MC.Module});
    // A layer's forward inside a module's forward or own method (`embed()`)
    // runs when that method runs: calling it is the forward judged.
    if (M.isOwnLayer(MC))
      Out.Flags = InsideModuleForward;
    return true;
  }

  Verdict judge(const RequirementMatch &M, const SiteContext &C) const override {
    if (C.Path.Grad == GradMode::Disabled || C.Path.Grad == GradMode::Unknown)
      return Verdict::Holds;
    // A module without parameters (an activation, a loss) records a graph
    // only for inputs that have one: the forward that made them is the one.
    if (M.Operands[0].Facts.HasParameters == Tri::No)
      return Verdict::Holds;
    if (C.Loop.Loop.isInvalid())
      return Verdict::Callers;
    if (!C.Loop.LoopWithoutBackward)
      return Verdict::Holds;
    return C.Path.Grad == GradMode::Enabled ? Verdict::Violated
                                            : Verdict::Callers;
  }
};

const ForwardWithoutGraphUse Instance;
const RequirementRegistration Registered(Instance);

} // namespace

InferenceWithoutNoGradCheck::InferenceWithoutNoGradCheck(
    StringRef Name, ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawBackwardFunctions(Options.get("BackwardFunctions", "")),
      RawGuardTypes(Options.get("GuardTypes", "")) {
  Kind = &Instance;
}

void InferenceWithoutNoGradCheck::storeOptions(
    ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "BackwardFunctions", RawBackwardFunctions);
  Options.store(Opts, "GuardTypes", RawGuardTypes);
}

void InferenceWithoutNoGradCheck::report(const Violation &V,
                                         ProgramModel &Program) {
  // A module's forward runs its submodules' forwards when its caller's
  // forward does: that call is the report.
  if (V.FromCallee && (V.Match.Flags & InsideModuleForward))
    return;
  const Stmt *Forward = V.Context.At ? V.Context.At : V.Site;
  // The output meets a backward, or leaves where the analysis can follow.
  if (Program.graphsBackpropagated().contains(Forward))
    return;
  if (const FunctionDecl *F = V.Analysis ? V.Analysis->function() : nullptr)
    if (Program.graphsKeptBy(*F).contains(Forward))
      return;
  if (V.FromCallee)
    if (const auto *Callee = dyn_cast_or_null<FunctionDecl>(V.Callee))
      if (const FunctionDecl *Def = Callee->getDefinition();
          Def && Program.graphsKeptBy(*Def).contains(Forward) &&
          !Program.graphsReturnedBy(*Def).contains(Forward))
        return;
  SourceLocation Loop = V.Context.Loop.Loop;
  if (!ReportedLoops.insert(Loop).second)
    return;
  SourceLocation Loc = Forward->getBeginLoc();
  if (!firstAt(Loc))
    return;
  diag(Loc, "module forward in a loop that never calls backward() runs without "
            "torch::NoGradGuard; autograd records the graph and keeps every "
            "activation for a backward that never comes (evaluation or "
            "validation loop?)");
  // The loop is the caller's, or the callee's own (reached from here).
  if (V.FromCallee)
    diag(locationOf(V, /*InCallee=*/false),
         V.FromCallee->Context.Loop.Loop == Loop ? "reached from here"
                                                 : "called in the loop here",
         DiagnosticIDs::Note);
  diag(Loop,
       "this loop runs no backward() or optimizer step; declare "
       "'torch::NoGradGuard no_grad;' before it",
       DiagnosticIDs::Note);
}

} // namespace clang::tidy::torch
