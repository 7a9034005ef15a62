//===--- LossAccumulationGraphCheck.cpp - torch-tidy ----------------------===//
//
// The requirement: an accumulation of a value on an autograd graph does not
// add to storage that still holds the graph this same accumulation added on
// an earlier run (the engine tracks, per value, the statements whose graphs
// it keeps; a reset or a detach drops them). Unless a backward() goes
// through the accumulator, which is what keeping the graph is for, or,
// outside a training loop, the function hands the sum back to its caller.
//
//===----------------------------------------------------------------------===//

#include "LossAccumulationGraphCheck.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "support/FixIts.h"

namespace clang::tidy::torch {

namespace {

class GraphAccumulation : public Requirement {
public:
  llvm::StringRef name() const override { return "graph-accumulation"; }

  bool match(const Stmt &S, const FlowModel &M, const State &St,
             RequirementMatch &Out) const override {
    Accumulation A;
    if (!M.matchAccumulation(S, A))
      return false;
    const Expr *Acc = A.Into, *Value = A.Value;
    Location Storage = M.locationOf(Acc);
    if (Storage && A.How != Accumulation::Add)
      Storage = Storage.child(Selector::element());
    ValueFacts Before = Storage ? St.get(Storage) : M.evaluate(Acc, St);
    const ASTContext &Ctx = M.context();
    Out.Operands.push_back(
        {Before, quotedSource(Acc, Ctx, "the accumulator"), Acc, Storage});
    Out.Operands.push_back({M.evaluate(Value, St), quotedSource(Value, Ctx, "the value"),
                            Value});
    Out.Flags = A.How;
    if (Storage.Kind == Location::Local && outlivesFunction(Storage, M.function()))
      Out.Flags |= IntoAnotherFunctionsVariable;
    return true;
  }

  /// The accumulator is a variable another function declares (a capture
  /// of a hook that a trainer runs).
  static constexpr unsigned IntoAnotherFunctionsVariable = 1u << 8;
  static constexpr unsigned HowMask = 3;

  Verdict judge(const RequirementMatch &M, const SiteContext &C) const override {
    const ValueFacts &Acc = M.Operands[0].Facts;
    const ValueFacts &Value = M.Operands[1].Facts;
    // With autograd off, or on or off by a value the model does not know,
    // nothing proves a graph.
    if (C.Path.Grad == GradMode::Disabled || C.Path.Grad == GradMode::Unknown)
      return Verdict::Holds;
    bool InGraph = Value.Graph.Value == GraphState::InGraph;
    if (!InGraph && !isCallerEntry(Value.Graph))
      return Verdict::Holds;
    // The accumulator still holds the graph this accumulation added before.
    if (InGraph && C.At && llvm::is_contained(Acc.GraphSources, C.At))
      return Verdict::Violated;
    // Another function's variable, to which a training loop away from that
    // function adds each iteration's graph.
    bool IntoOther = M.Flags & IntoAnotherFunctionsVariable;
    if (InGraph && IntoOther && C.Loop.TrainingLoop.isValid() &&
        !withinDeclaringFunction(M.Operands[0].Storage, C.Loop.TrainingLoop))
      return Verdict::Violated;
    // A caller's accumulator: its loop may run this again.
    if (isCallerEntry(Acc.Graph) || isCallerEntry(Acc.Device) ||
        isCallerEntry(Value.Graph))
      return Verdict::Callers;
    return Verdict::Holds;
  }
};

const GraphAccumulation Instance;
const RequirementRegistration Registered(Instance);

} // namespace

LossAccumulationGraphCheck::LossAccumulationGraphCheck(
    StringRef Name, ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawBackwardFunctions(Options.get("BackwardFunctions", "")),
      RawAccumulatingFunctions(Options.get("AccumulatingFunctions", "")),
      RawGuardTypes(Options.get("GuardTypes", "")) {
  Kind = &Instance;
}

void LossAccumulationGraphCheck::storeOptions(
    ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "BackwardFunctions", RawBackwardFunctions);
  Options.store(Opts, "AccumulatingFunctions", RawAccumulatingFunctions);
  Options.store(Opts, "GuardTypes", RawGuardTypes);
}

void LossAccumulationGraphCheck::report(const Violation &V,
                                        ProgramModel &Program) {
  const Stmt *At = V.Context.At ? V.Context.At : V.Site;
  // A backward through the accumulator is what keeping the graph is for.
  if (Program.graphsBackpropagated().contains(At))
    return;
  const Operand &Acc = V.Match.Operands[0];
  const Operand &Value = V.Match.Operands[1];
  const FlowModel *Model = nullptr;
  const FunctionDecl *Where = nullptr;
  if (V.Analysis) {
    Where = V.Analysis->function();
    Model = &V.Analysis->model();
  }
  Location Storage = Model && Acc.Source ? Model->locationOf(Acc.Source)
                                         : Location();
  // Outside a training loop, a sum handed back to the caller (a loss summing
  // per-head terms), or a caller's accumulator, is the caller's business.
  if (V.Context.Loop.TrainingLoop.isInvalid()) {
    if (Where && Program.graphsReturnedBy(*Where).contains(At))
      return;
    if (Storage.Kind == Location::Local && isa_and_nonnull<ParmVarDecl>(Storage.Root))
      return;
  }
  SourceLocation Loc = At->getBeginLoc();
  if (!firstAt(Loc))
    return;
  const ASTContext &Ctx = Program.context();
  std::string ValueName = nameOf(Value, Ctx, "the value");
  std::string AccName = nameOf(Acc, Ctx, "the accumulator");
  std::string Place;
  if (Storage.Kind == Location::This && Storage.Depth >= 1)
    Place = "member '" +
            Selector::fromRaw(Storage.Path[0]).asField()->getNameAsString() + "'";
  else if (Storage.Kind == Location::Local && isa_and_nonnull<ParmVarDecl>(Storage.Root))
    Place = "parameter " + AccName;
  else if (Storage.Kind == Location::Global)
    Place = "global " + AccName;
  else
    Place = AccName + ", declared outside the loop";
  unsigned How = V.Match.Flags & GraphAccumulation::HowMask;
  const char *Verb = How == Accumulation::Add ? "accumulated into"
                     : How == Accumulation::Append ? "appended to"
                                               : "stored into";
  {
    auto Diag = diag(Loc, "%0%1 is still attached to its autograd graph and "
                          "is %2 %3; every iteration's graph stays alive and "
                          "memory grows with each step")
                << ValueName << fromWhere(Value.Facts.Graph, Ctx) << Verb
                << Place;
    if (!V.FromCallee && Value.Source)
      for (const FixItHint &Fix : callOnValue(*Value.Source, ".detach()", Ctx))
        Diag << Fix;
  } // the warning is emitted here, before its notes
  if (V.FromCallee)
    diag(locationOf(V, /*InCallee=*/false), "called here, on every iteration",
         DiagnosticIDs::Note);
  if (!Value.Facts.Graph.Origin.isMacroID())
    noteFact(Value.Facts.Graph, ValueName, "%0 joins the autograd graph here");
}

} // namespace clang::tidy::torch
