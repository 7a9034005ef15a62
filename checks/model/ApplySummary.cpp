//===--- ApplySummary.cpp - torch-tidy ------------------------------------===//
//
// FlowModel::applySummary: a user function's summary at its call. Its
// effects on what the caller sees, and its returned value and parts, in the
// caller's terms (Instantiate.cpp); the graphs its arguments keep alive.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "ProgramModel.h"
#include "Summary.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

void FlowModel::keepArgumentGraphs(const ResolvedCall &Call, const State &S,
                                   ValueFacts &Returned) const {
  if (Returned.Graph.Value == GraphState::NoGraph)
    return;
  for (const Expr *Arg : Call.Arguments) {
    if (!Arg)
      continue;
    const Expr *Stripped = stripConversions(Arg);
    if (isTensorType(Stripped->getType())) {
      unite<const Stmt *>(Returned.GraphSources, evaluate(Stripped, S).GraphSources);
    } else if (containerRecord(Stripped->getType())) {
      if (Location C = locationOf(Stripped))
        for (const Location &Part : S.tree(C))
          if (const ValueFacts *F = S.lookup(Part))
            unite<const Stmt *>(Returned.GraphSources, F->GraphSources);
    }
  }
}

void FlowModel::copyArgumentParts(const ValueFacts &Exit,
                                  const ResolvedCall &Call,
                                  const State &Before, const Location &Here,
                                  State &St) const {
  const auto *P = dyn_cast_or_null<ParmVarDecl>(Exit.Device.Entry);
  if (!P || Exit.Device.isKnown() || Exit.Pin.Entry != P || Exit.Pin.isKnown())
    return;
  if (Location From = callerLocation(Location::local(P), Call)) {
    for (const Location &Part : Before.tree(From))
      if (Part != From)
        if (Location To = Part.replacePrefix(From, Here))
          St.set(To, Before.get(Part));
    return;
  }
  // A temporary (`set(Stats{a, b})`): its parts as a declaration sets them.
  unsigned Index = P->getFunctionScopeIndex();
  if (!Call.Callee || Index >= Call.Arguments.size() || !Call.Arguments[Index] ||
      !isa<FunctionDecl>(P->getDeclContext()) ||
      cast<FunctionDecl>(P->getDeclContext())->getCanonicalDecl() !=
          Call.Callee->getCanonicalDecl() ||
      !P->getType().getNonReferenceType()->isRecordType())
    return;
  State Scratch = Before;
  assign(Here, P->getType(), Call.Arguments[Index], Call.Call->getBeginLoc(),
         Scratch);
  for (const Location &Part : Scratch.tree(Here))
    if (Part != Here)
      St.set(Part, Scratch.get(Part));
}

bool inContainerElement(const Location &L) {
  QualType Type;
  if (const auto *Root = dyn_cast_or_null<ValueDecl>(L.Root))
    Type = Root->getType();
  for (unsigned I = 0; I < L.Depth; ++I) {
    Selector Step = Selector::fromRaw(L.Path[I]);
    if (Step.isElement()) {
      QualType Holder = Type.isNull() ? Type : Type.getNonReferenceType();
      if (!Holder.isNull() && !isOwningPointer(Holder) && !isOptional(Holder))
        return true;
      Type = QualType(); // what an owner holds: not followed further
      continue;
    }
    const FieldDecl *Field = Step.asField();
    Type = Field ? Field->getType() : QualType();
  }
  return false;
}

/// Whether each fact of \p F is established or the entry value: none is
/// one that the callee made unknown.
static bool establishedOrEntry(const ValueFacts &F) {
  auto Either = [](const auto &Fact) { return Fact.isKnown() || Fact.Entry; };
  return Either(F.Device) && Either(F.Pin) && Either(F.Graph) &&
         Either(F.Mode);
}

void FlowModel::applySummary(const ResolvedCall &Call,
                             const FunctionSummary &Summary,
                             const Location &Result, State &St) const {
  // The facts after the call are computed from the state before it.
  const State Before = St;
  if (Summary.SelectsCuda && St.path().Cuda != CudaGuard::Checked)
    St.path().CudaSelectedBefore = true;
  if (Summary.ClobbersModes)
    forgetModes(St);
  // A device the callee names by the member that holds it is what the
  // member holds after the call: not what it held before, when the call
  // changes it.
  llvm::SmallVector<Location, 4> Rewritten;
  for (const Location &L : Summary.Clobbers)
    if (Location Here = callerLocation(L, Call)) {
      // The objects its reference members (or shared module handles) name
      // may have changed with it.
      if (L == Location::thisObject())
        forgetBoundObjects(Here, St);
      St.forgetTree(Here);
      if (Here.Kind == Location::This)
        St.markClobbered(Here);
      Rewritten.push_back(Here);
    }
  for (const SummaryEffect &Effect : Summary.Effects)
    if (Location Here = callerLocation(Effect.Where, Call))
      Rewritten.push_back(Here);
  for (const SummaryEffect &Effect : Summary.Effects) {
    Location Here = callerLocation(Effect.Where, Call);
    if (!Here)
      continue;
    // A mode switched on another function's variable (a module a lambda
    // captured where it was written) may be that of any module this one
    // holds too (a member bound to the same module): that variable's
    // function knows it. So may one switched on a container's elements
    // (`for (auto &kv : models_) kv.second->eval();`): a handle taken out
    // of it shares its module.
    if (Effect.Exit.Mode.isKnown() || Effect.Exit.ModeIf) {
      if (isForeignVariable(Here, Function))
        forgetModes(St);
      else if (inContainerElement(Here))
        forgetModes(St, locationType(Here));
    }
    copyArgumentParts(Effect.Exit, Call, Before, Here, St);
    ValueFacts After = instantiate(Effect.Exit, Call, Before, Rewritten);
    ValueFacts Held = heldForUpdate(Here, Before);
    if (Effect.Exit.KeepsCallerFacts)
      After = overCallerFacts(After, Held);
    else if (Held.KeepsCallerFacts && establishedOrEntry(Effect.Exit))
      // A part of this function's own caller's storage that nothing here
      // established: what the callee kept of it stays what that caller
      // holds.
      After.KeepsCallerFacts = true;
    // A module handle passed by value still names the caller's module: its
    // module facts change, not the handle.
    if (const auto *P = dyn_cast_or_null<ParmVarDecl>(Effect.Where.Root);
        P && !Effect.Where.Depth && isModuleHandleType(P->getType())) {
      ValueFacts F = St.get(Here);
      F.Device = After.Device;
      F.Mode = After.Mode;
      F.ModeIf = After.ModeIf;
      After = F;
    }
    // One element written stands for all of them: the graphs the others
    // keep stay kept (a "some element" fact).
    if (Here.isElement())
      if (const ValueFacts *Old = Before.lookup(Here)) {
        for (const Stmt *Source : Old->GraphSources)
          if (!llvm::is_contained(After.GraphSources, Source))
            After.GraphSources.push_back(Source);
        // So do the callables the others hold (`hooks_.push_back(h)`).
        if (!Old->Empty) {
          unite<const FunctionDecl *>(After.Callables, Old->Callables);
          After.CallablesKnown &= Old->CallablesKnown;
        }
      }
    St.set(Here, After);
  }
  if (Result) {
    // The parts of a forward's output (a tuple of heads) keep the graph the
    // forward call recorded, as its whole value does (evaluateModuleCall);
    // so do those of a module's own method that runs its layers
    // (`auto [logits, h] = vae->decode_step(tok, h)`).
    ModuleCall Forward;
    const auto *CE = dyn_cast_or_null<CallExpr>(Call.Call);
    bool IsForward = CE && matchModuleCall(*CE, Forward);
    bool RunsLayers = CE && !IsForward && Summary.RunsOwnLayers &&
                      runsModule(*CE, Forward);
    // A part whose device the body does not prove is on the module's, as
    // the whole output is.
    Sourced<DeviceValue> OutputDevice;
    if (IsForward)
      OutputDevice = evaluateModuleCall(*CE, Forward, Before).Device;
    // A parameter returned as it came (`return f;`, `return Pair{f, g};`):
    // the caller's argument, parts included; what the body proves of a
    // part is set below and wins.
    for (const SummaryEffect &R : Summary.Returns)
      if (Location Here = R.Where.replacePrefix(Location::returned(), Result))
        copyArgumentParts(R.Exit, Call, Before, Here, St);
    for (const SummaryEffect &R : Summary.Returns)
      if (Location Here = R.Where.replacePrefix(Location::returned(), Result)) {
        ValueFacts Part = instantiate(R.Exit, Call, Before, Rewritten);
        if (IsForward && R.Where.Depth && !Part.Device.Value.isKnown())
          Part.Device = OutputDevice;
        keepArgumentGraphs(Call, Before, Part);
        if ((IsForward || RunsLayers) &&
            (Part.Graph.Value == GraphState::InGraph ||
             !Part.GraphSources.empty()))
          unite<const Stmt *>(Part.GraphSources, {Call.Call});
        St.set(Here, std::move(Part));
      }
    if (Location There = returnedArgumentPart(Summary, Call))
      for (const Location &Part : Before.tree(There))
          if (Location Into = Part.replacePrefix(There, Result))
            St.set(Into, overCallerFacts(St.get(Into), Before.get(Part)));
  }
  if (Summary.ExitGrad != GradMode::Entry)
    St.path().Grad = Summary.ExitGrad;
}

Location FlowModel::returnedArgumentPart(const FunctionSummary &Summary,
                                         const ResolvedCall &Call) const {
  const Location &Storage = Summary.ReturnedStorage;
  if (!Storage || Storage.Depth == 0)
    return {};
  // A member of the object (a getter's `return host_;`) that the callee
  // left as it found it.
  if (Storage.Kind == Location::This &&
      llvm::any_of(Summary.Effects, [&](const SummaryEffect &E) {
        return E.Where.hasPrefix(Storage) || Storage.hasPrefix(E.Where);
      }))
    return {};
  if (Storage.Kind != Location::Local && Storage.Kind != Location::This)
    return {};
  return callerLocation(Storage, Call);
}

} // namespace clang::tidy::torch
