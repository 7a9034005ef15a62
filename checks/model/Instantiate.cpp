//===--- Instantiate.cpp - torch-tidy -------------------------------------===//
//
// FlowModel::instantiate: a summary's facts, written in the callee's entry
// terms (its parameters, the members of `*this`, globals, captures), become
// facts of the caller at one call.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "ProgramModel.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

const Expr *argumentFor(const ResolvedCall &Call, const ParmVarDecl &P) {
  const auto *Callee = dyn_cast_or_null<FunctionDecl>(P.getDeclContext());
  if (!Callee || !Call.Callee ||
      Callee->getCanonicalDecl() != Call.Callee->getCanonicalDecl())
    return nullptr;
  unsigned Index = P.getFunctionScopeIndex();
  // `std::make_unique<T>(a)` for `T(A a, Device d = kCUDA)`: the default.
  if (Index >= Call.Arguments.size())
    return P.hasDefaultArg() && !P.hasUnparsedDefaultArg() &&
                   !P.hasUninstantiatedDefaultArg()
               ? P.getDefaultArg()
               : nullptr;
  const Expr *Arg = Call.Arguments[Index];
  if (const auto *Default = dyn_cast_or_null<CXXDefaultArgExpr>(Arg))
    return Default->getExpr();
  return Arg;
}

/// The location of a callee's entry value \p Entry, in the callee's terms.
static Location entryLocation(const ValueDecl &Entry) {
  if (const auto *Field = dyn_cast<FieldDecl>(&Entry))
    return Location::member(Field);
  if (const auto *Var = dyn_cast<VarDecl>(&Entry))
    return Var->hasGlobalStorage() && !isa<ParmVarDecl>(Var)
               ? Location::global(Var)
               : Location::local(Var);
  return {};
}

/// Whether \p P is one of \p F's parameters (of its declaration or of the
/// definition the analysis saw).
static bool isParameterOf(const ParmVarDecl &P, const FunctionDecl &F) {
  const auto *Owner = dyn_cast<FunctionDecl>(P.getDeclContext());
  return !Owner || Owner->getCanonicalDecl() == F.getCanonicalDecl();
}

Location FlowModel::callerLocation(const Location &InCallee,
                                   const ResolvedCall &Call) const {
  switch (InCallee.Kind) {
  case Location::Local: {
    // A lambda's parameter, when a library algorithm runs it over a range.
    if (const auto *P = dyn_cast<ParmVarDecl>(InCallee.Root); P && Call.Call)
      if (Location Element = algorithmElement(*P, *Call.Call))
        return throughBindings(InCallee.rebased(Element));
    if (const auto *P = dyn_cast<ParmVarDecl>(InCallee.Root);
        P && (!Call.Callee || isParameterOf(*P, *Call.Callee))) {
      const Expr *Arg = argumentFor(Call, *P);
      if (!Arg)
        return {};
      // A container built from another value (an optional from its
      // element, `std::optional<Scaler>` from `Scaler`): a temporary, no
      // storage of the caller's (callerStorage builds it).
      QualType Type = P->getType().getNonReferenceType();
      if (containerRecord(Type) &&
          !Ctx.hasSameUnqualifiedType(
              Type, stripConversions(Arg)->getType().getNonReferenceType()))
        return {};
      Location Base = P->getType()->isPointerType()
                          ? pointeeLocation(Arg)
                          : locationOf(stripConversions(Arg));
      // `*net` passed for a `Module &`: the handle.
      return Base ? throughBindings(InCallee.rebased(Base)) : Location();
    }
    // A variable a lambda captures: the caller's own, when the caller is the
    // function that declares it or a lambda that captures it too; else the
    // variable of the function that declares it, which this caller's
    // callers reach (a hook run by a trainer's method).
    if (InCallee.Root && Function &&
        (InCallee.Root->getDeclContext() == Function ||
         llvm::is_contained(capturedVariables(*Function), InCallee.Root)))
      return InCallee;
    if (InCallee.Root &&
        isForeignVariable(Location::local(InCallee.Root), Function))
      return InCallee;
    return {};
  }
  case Location::This:
    return Call.Object ? throughBindings(InCallee.rebased(Call.Object))
                       : Location();
  case Location::Global:
    return InCallee;
  default:
    return {};
  }
}

Location FlowModel::callerStorage(const Location &InCallee,
                                  const ResolvedCall &Call, const State &St,
                                  std::optional<State> &Scratch) const {
  if (Location L = callerLocation(InCallee, Call))
    return L;
  // A part of a parameter given a temporary (`to_device(make_graph())`):
  // the temporary, built as a variable initialised with it would be.
  const auto *P = InCallee.Kind == Location::Local
                      ? dyn_cast_or_null<ParmVarDecl>(InCallee.Root)
                      : nullptr;
  const Expr *Arg = P ? argumentFor(Call, *P) : nullptr;
  QualType Type = P ? P->getType().getNonReferenceType() : QualType();
  if (!Arg || !Type->isRecordType() || isTensorType(Type) ||
      isModuleHandleType(Type) || P->getType()->isPointerType())
    return {};
  Scratch = St;
  Location Temporary = Location::returned();
  Scratch->forgetTree(Temporary);
  assign(Temporary, Type, Arg, Arg->getExprLoc(), *Scratch);
  return InCallee.rebased(Temporary);
}

std::optional<bool>
FlowModel::decideParameterTest(const ParameterTest &Test,
                               const ResolvedCall &Call, const State &S,
                               ParameterTest &Chained) const {
  Chained = {};
  if (Call.Callee && !isParameterOf(*Test.Param, *Call.Callee))
    return std::nullopt;
  const Expr *Arg = argumentFor(Call, *Test.Param);
  if (!Arg)
    return std::nullopt;
  if (std::optional<int64_t> V = evaluateScalar(Arg, S).Known)
    return (Test.Equals ? *V == *Test.Equals : *V != 0) != Test.Negated;
  // The caller's own parameter passed on: its callers decide.
  if (Test.Equals) {
    if (const ParmVarDecl *P = unwrittenParameter(Arg))
      Chained = {P, Test.Equals, Test.Negated};
  } else if ((Chained = parameterTest(Arg))) {
    Chained.Negated ^= Test.Negated;
  }
  return std::nullopt;
}

ValueFacts FlowModel::entryValueAt(const ValueDecl &Entry,
                                   const ResolvedCall &Call,
                                   const State &S) const {
  // A parameter of the callee is its argument; one of an enclosing function
  // that a lambda captured is the caller's variable, like a captured local.
  if (const auto *P = dyn_cast<ParmVarDecl>(&Entry);
      P && (!Call.Callee || isParameterOf(*P, *Call.Callee))) {
    if (const Expr *Arg = argumentFor(Call, *P))
      return evaluate(Arg, S);
    if (!Call.Call || !algorithmElement(*P, *Call.Call))
      return ValueFacts();
  }
  Location L = callerLocation(entryLocation(Entry), Call);
  if (!L)
    return ValueFacts();
  if (const ValueFacts *F = S.lookup(L)) {
    if (F->Empty)
      return ValueFacts();
    ValueFacts Held = *F;
    if (QualType T = Entry.getType().getNonReferenceType(); isModuleHandleType(T))
      withClassFacts(Held, T);
    return Held;
  }
  // Another function's variable that a hook captured: what it held when
  // this function was entered.
  if (isForeignVariable(L, Function))
    return ValueFacts::atEntry(*L.Root);
  if (std::optional<ValueFacts> Part = enclosingModuleFacts(L, S))
    return *Part;
  if (L.Kind == Location::Global)
    if (const auto *Global = dyn_cast<VarDecl>(L.Root))
      return Program.globalFacts(*Global, L);
  return ValueFacts();
}

template <typename T>
Sourced<T> FlowModel::throughCall(const Sourced<T> &InCallee,
                                  const ResolvedCall &Call) const {
  Sourced<T> R = InCallee;
  R.Entry = nullptr;
  if (Call.Callee)
    R.Via = Program.step(Call.Call->getExprLoc(),
                         Program.calleeName(*Call.Callee), InCallee.Via);
  return R;
}

Sourced<DeviceValue>
FlowModel::instantiate(const Sourced<DeviceValue> &InCallee,
                       const ResolvedCall &Call, const State &S,
                       llvm::ArrayRef<Location> Rewritten,
                       bool *Conflict) const {
  // Two entry values an operation combined: as the operation would decide
  // with the callers' facts (a known device over an unknown one, but not a
  // CPU tensor that may be a 0-dim scalar).
  if (InCallee.Entry && InCallee.AlsoEntry && InCallee.EitherEntry) {
    // One of two entry values: the callers' facts when they agree, or the
    // caller's own two entry values, still to be settled.
    Sourced<DeviceValue> One = InCallee, Two = InCallee;
    One.AlsoEntry = Two.AlsoEntry = nullptr;
    One.EitherEntry = Two.EitherEntry = false;
    Two.Entry = InCallee.AlsoEntry;
    Sourced<DeviceValue> A = instantiate(One, Call, S, Rewritten);
    Sourced<DeviceValue> B = instantiate(Two, Call, S, Rewritten);
    if (A.isKnown() && A.Value == B.Value && !A.Entry && !B.Entry)
      return A;
    ValueFacts FromA, FromB;
    FromA.Device = A;
    FromB.Device = B;
    return joinFacts(FromA, FromB).Device;
  }
  if (InCallee.Entry && InCallee.AlsoEntry) {
    Sourced<DeviceValue> One = InCallee, Two = InCallee;
    One.AlsoEntry = Two.AlsoEntry = nullptr;
    Two.Entry = InCallee.AlsoEntry;
    Sourced<DeviceValue> A = instantiate(One, Call, S, Rewritten);
    Sourced<DeviceValue> B = instantiate(Two, Call, S, Rewritten);
    auto Decides = [&](const Sourced<DeviceValue> &D, const ValueDecl &E) {
      return D.Value.isKnown() &&
             !(D.Value.isCPU() && entryValueAt(E, Call, S).mayBeZeroDim());
    };
    bool DA = Decides(A, *One.Entry), DB = Decides(B, *Two.Entry);
    if (DA && DB) {
      if (A.Value == B.Value)
        return A;
      if (Conflict)
        *Conflict = true;
      if (A.Value.isCPU() != B.Value.isCPU())
        return A.Value.isCPU() ? B : A;
      return {};
    }
    if (DA || DB)
      return DA ? A : B;
    // Only CPU tensors (0-dim or not) compute on the CPU.
    if (A.Value.isCPU() && B.Value.isCPU())
      return A;
    // Neither decides: the caller's own entry values, still to be settled.
    if (A.Entry && !A.Value.isKnown() && B.Entry && !B.Value.isKnown() &&
        A.Entry != B.Entry && !A.AlsoEntry && !B.AlsoEntry) {
      A.AlsoEntry = B.Entry;
      return A;
    }
    if (A.Entry && !A.Value.isKnown())
      return A;
    if (B.Entry && !B.Value.isKnown())
      return B;
    return {};
  }
  if (InCallee.Entry) {
    Sourced<DeviceValue> Here = entryValueAt(*InCallee.Entry, Call, S).Device;
    // A member or global the caller knows nothing of holds what the
    // program gives it (the class state the callee started from).
    if (!Here.isKnown() && !isa<ParmVarDecl>(InCallee.Entry) &&
        InCallee.isKnown())
      return throughCall(InCallee, Call);
    return Here;
  }
  const DeviceValue &V = InCallee.Value;
  // "Whatever the callee's device parameter holds": the argument's device.
  if (V.isSymbolic())
    if (const auto *P = dyn_cast_or_null<ParmVarDecl>(V.holder())) {
      if (const Expr *Arg = argumentFor(Call, *P)) {
        DeviceValue Passed = evaluateDeviceSpec(Arg, S).Value;
        if (!Passed.isKnown())
          return {};
        Sourced<DeviceValue> R = throughCall(InCallee, Call);
        R.Value = Passed;
        return R;
      }
      // Another function's parameter is meaningful here only as the
      // caller's own, or as a constructor's that members keep.
      const auto *Owner = dyn_cast<FunctionDecl>(P->getDeclContext());
      bool OfCallee = Owner && Call.Callee &&
                      Owner->getCanonicalDecl() ==
                          Call.Callee->getCanonicalDecl();
      if (Owner && (OfCallee || (Owner != Function &&
                                 !isa<CXXConstructorDecl>(Owner))))
        return {};
    }
  if (V.isSymbolic())
    if (const auto *Field = dyn_cast_or_null<FieldDecl>(V.holder()))
      if (Location L = callerLocation(Location::member(Field), Call);
          L && llvm::none_of(Rewritten, [&](const Location &W) {
            return L.hasPrefix(W);
          }))
        if (const ValueFacts *F = S.lookup(L))
          if (F->Device.Value.isKnown() && !F->Device.Value.isSymbolic())
            return F->Device;
  if (!V.isKnown())
    return {};
  return throughCall(InCallee, Call);
}

Sourced<GraphState>
FlowModel::instantiateEitherGraph(const Sourced<GraphState> &InCallee,
                                  const ResolvedCall &Call,
                                  const State &S) const {
  Sourced<GraphState> A = entryValueAt(*InCallee.Entry, Call, S).Graph;
  Sourced<GraphState> B = entryValueAt(*InCallee.AlsoEntry, Call, S).Graph;
  if (A.Value == GraphState::InGraph || B.Value == GraphState::InGraph)
    return A.Value == GraphState::InGraph ? A : B;
  if (A.Value == GraphState::NoGraph && B.Value == GraphState::NoGraph)
    return A;
  // Still the caller's own entry values: one, when the other has no graph.
  auto Plain = [](const Sourced<GraphState> &G) {
    return G.Entry && !G.isKnown() && !G.AlsoEntry &&
           G.Otherwise == GraphState();
  };
  if (Plain(A) && B.Value == GraphState::NoGraph)
    return A;
  if (Plain(B) && A.Value == GraphState::NoGraph)
    return B;
  if (Plain(A) && Plain(B) && A.Entry != B.Entry) {
    A.AlsoEntry = B.Entry;
    return A;
  }
  if (Plain(A) && Plain(B))
    return A;
  return {};
}

ValueFacts FlowModel::instantiate(const ValueFacts &InCallee,
                                  const ResolvedCall &Call, const State &S,
                                  llvm::ArrayRef<Location> Rewritten) const {
  ValueFacts R = InCallee;
  // The callee's `this` is the caller's only for a call on it.
  R.CallablesOnThis &= Call.Object == Location::thisObject();
  bool Conflict = false;
  R.Device = instantiate(InCallee.Device, Call, S, Rewritten, &Conflict);
  R.FromDeviceConflict |= Conflict;
  // An op of the callee that needed this entry value on the result's
  // device: the caller's value decides, or its own callers do.
  R.ConflictIf = nullptr;
  if (InCallee.ConflictIf && R.Device.Value.isKnown()) {
    Sourced<DeviceValue> Passed =
        entryValueAt(*InCallee.ConflictIf, Call, S).Device;
    if (Passed.Value.isKnown() && !(Passed.Value == R.Device.Value)) {
      R.FromDeviceConflict = true;
      // Where the fix puts it: on the accelerator operand's device.
      if (R.Device.Value.isCPU() && !Passed.Value.isCPU())
        R.Device = Passed;
    } else if (!Passed.Value.isKnown() &&
             isa_and_nonnull<ParmVarDecl>(Passed.Entry) && !Passed.AlsoEntry)
      R.ConflictIf = Passed.Entry;
  }
  // A copy pending if the callers pass a CUDA tensor: this call decides, or
  // hands the question on to its own callers.
  if (InCallee.PendingIf) {
    R.PendingIf = nullptr;
    Sourced<DeviceValue> Passed =
        entryValueAt(*InCallee.PendingIf, Call, S).Device;
    if (!Passed.Value.mayBeCUDA()) {
      if (isa_and_nonnull<ParmVarDecl>(Passed.Entry) && !Passed.Value.isKnown())
        R.PendingIf = Passed.Entry;
      else
        R.clearPendingCopy();
    }
  }
  if (R.PendingCopy.isValid() && InCallee.PendingCopy.isValid() && Call.Callee)
    R.PendingVia = Program.step(Call.Call->getExprLoc(),
                                Program.calleeName(*Call.Callee),
                                InCallee.PendingVia);
  if (R.ConvertedCopy.isValid() && Call.Callee)
    R.ConvertedVia = Program.step(Call.Call->getExprLoc(),
                                  Program.calleeName(*Call.Callee),
                                  InCallee.ConvertedVia);
  auto Substitute = [&](const auto &Fact, auto Member) {
    using SourcedT = std::decay_t<decltype(Fact)>;
    if (Fact.Entry) {
      SourcedT Here = entryValueAt(*Fact.Entry, Call, S).*Member;
      if (!Here.isKnown() && !isa<ParmVarDecl>(Fact.Entry) && Fact.isKnown())
        return throughCall(Fact, Call);
      if (Fact.Otherwise == decltype(Fact.Otherwise)())
        return Here;
      // The entry value on some paths, Otherwise on the others: known when
      // the caller's value is Otherwise. (A path of the callee may not run
      // for this call: "one or the other" would claim that it does.)
      if constexpr (std::is_same_v<SourcedT, Sourced<ModuleMode>>)
        // Training on every path or on some: on some path, whichever runs.
        if (Here.isKnown() && Here.Value != Fact.Otherwise &&
            Here.Value != ModuleMode::Eval &&
            Fact.Otherwise != ModuleMode::Eval) {
          SourcedT Some = throughCall(Fact, Call);
          Some.Value = ModuleMode::TrainOnSomePath;
          Some.Otherwise = {};
          return Some;
        }
      if (Here.isKnown())
        return Here.Value == Fact.Otherwise ? Here : SourcedT();
      if (!Here.Entry || Here.AlsoEntry ||
          (Here.Otherwise != decltype(Fact.Otherwise)() &&
           Here.Otherwise != Fact.Otherwise))
        return SourcedT();
      // The caller's own entry value, or the same Otherwise.
      SourcedT Chained = throughCall(Fact, Call);
      Chained.Entry = Here.Entry;
      return Chained;
    }
    return Fact.isKnown() ? throughCall(Fact, Call) : SourcedT();
  };
  // What a callable part of a parameter held at entry: the caller's part.
  R.CallablesAtEntry = {};
  if (const ValueFacts::ParameterPart Part = InCallee.CallablesAtEntry;
      Part && R.Callables.empty() && !R.CallablesKnown) {
    std::optional<ValueFacts> Held;
    if (!Part.Field) {
      Held = entryValueAt(*Part.Param, Call, S);
    } else if (Location There = callerLocation(
                   Location::local(Part.Param).child(Selector::field(Part.Field)),
                   Call)) {
      if (const ValueFacts *F = S.lookup(There))
        Held = *F;
    }
    if (Held) {
      R.Callables = Held->Callables;
      R.CallablesKnown = Held->CallablesKnown;
      R.CallablesOnThis = Held->CallablesOnThis;
      R.CallablesAtEntry = Held->CallablesAtEntry;
    }
  }
  R.Pin = Substitute(InCallee.Pin, &ValueFacts::Pin);
  R.Graph = InCallee.Graph.AlsoEntry
                ? instantiateEitherGraph(InCallee.Graph, Call, S)
                : Substitute(InCallee.Graph, &ValueFacts::Graph);
  R.Mode = Substitute(InCallee.Mode, &ValueFacts::Mode);
  R.ModeIf = {};
  // The mode a flag held at entry (`train(saved_)`): a flag the caller
  // holds as a constant, or as a test its own callers decide.
  if (const ValueDecl *Flag = InCallee.Mode.Entry;
      Flag && !R.Mode.isKnown() && !R.Mode.Entry &&
      Flag->getType().getNonReferenceType()->isBooleanType()) {
    ValueFacts Held = entryValueAt(*Flag, Call, S);
    if (Held.Scalar.Known)
      R.Mode = throughCall(
          Sourced<ModuleMode>{*Held.Scalar.Known ? ModuleMode::Train
                                                 : ModuleMode::Eval,
                              InCallee.Mode.Origin},
          Call);
    else
      R.ModeIf = Held.ModeIf;
  }
  if (InCallee.ModeIf && !R.ModeIf)
    if (std::optional<bool> Train =
            decideParameterTest(InCallee.ModeIf, Call, S, R.ModeIf))
      R.Mode = throughCall(
          Sourced<ModuleMode>{*Train ? ModuleMode::Train : ModuleMode::Eval,
                              InCallee.Mode.Origin},
          Call);
  // What the callee did not establish itself comes with the entry value.
  const ValueDecl *Entry = InCallee.Device.Entry   ? InCallee.Device.Entry
                           : InCallee.Pin.Entry    ? InCallee.Pin.Entry
                           : InCallee.Graph.Entry  ? InCallee.Graph.Entry
                                                   : InCallee.Mode.Entry;
  if (Entry) {
    ValueFacts Caller = entryValueAt(*Entry, Call, S);
    R.MinDims = std::max(InCallee.MinDims, Caller.MinDims);
    if (InCallee.PendingCopy.isInvalid()) {
      R.PendingCopy = Caller.PendingCopy;
      R.PendingVia = Caller.PendingVia;
      R.PendingIf = Caller.PendingIf;
    }
    for (const Stmt *Source : Caller.GraphSources)
      if (!llvm::is_contained(R.GraphSources, Source))
        R.GraphSources.push_back(Source);
    // And those of the value it was combined with.
    for (const ValueDecl *Also : {InCallee.Device.AlsoEntry, InCallee.Graph.AlsoEntry})
      if (Also && Also != Entry)
        for (const Stmt *Source : entryValueAt(*Also, Call, S).GraphSources)
          if (!llvm::is_contained(R.GraphSources, Source))
            R.GraphSources.push_back(Source);
    if (R.HasParameters == Tri::Unknown)
      R.HasParameters = Caller.HasParameters;
    if (R.MeanLoss == Tri::Unknown) {
      R.MeanLoss = Caller.MeanLoss;
      R.HalfAutocast = Caller.HalfAutocast;
    }
    if (R.ModeLayers == Tri::Unknown)
      R.ModeLayers = Caller.ModeLayers;
    if (R.Scalar.empty())
      R.Scalar = Caller.Scalar;
    if (R.Callables.empty() && !R.CallablesKnown) {
      R.Callables = Caller.Callables;
      R.CallablesKnown = Caller.CallablesKnown;
      R.CallablesOnThis = Caller.CallablesOnThis;
    }
    if (InCallee.Device.Entry)
      R.DeviceUnset = Caller.DeviceUnset;
    // A value with no graph keeps none alive, whatever the callee added.
    if (R.Graph.Value == GraphState::NoGraph)
      R.GraphSources.clear();
    return R;
  }
  return R;
}

} // namespace clang::tidy::torch
