//===--- Facts.cpp - torch-tidy -------------------------------------------===//

#include "Facts.h"
#include "State.h"
#include "api/TorchMatchers.h"
#include "llvm/ADT/STLExtras.h"

namespace clang::tidy::torch {

//===--- Value facts -------------------------------------------------------===//

bool ValueFacts::operator==(const ValueFacts &O) const {
  return Device == O.Device && Pin == O.Pin && Graph == O.Graph &&
         Mode == O.Mode && ModeLayers == O.ModeLayers &&
         HasParameters == O.HasParameters && PendingCopy == O.PendingCopy &&
         PendingIf == O.PendingIf &&
         MayBeZeroDim == O.MayBeZeroDim && DeviceUnset == O.DeviceUnset &&
         FromDeviceConflict == O.FromDeviceConflict &&
         Scalar == O.Scalar && Callables == O.Callables &&
         CallablesKnown == O.CallablesKnown &&
         GraphSources == O.GraphSources && Empty == O.Empty &&
         KeepsCallerFacts == O.KeepsCallerFacts;
}

ValueFacts ValueFacts::atEntry(const ValueDecl &Holder) {
  ValueFacts F;
  F.Device.Entry = &Holder;
  F.Pin.Entry = &Holder;
  F.Graph.Entry = &Holder;
  F.Mode.Entry = &Holder;
  return F;
}

ValueFacts ValueFacts::withoutEntries() const {
  ValueFacts F = *this;
  F.Device.Entry = nullptr;
  F.Device.AlsoEntry = nullptr;
  F.Device.EitherEntry = false;
  F.Pin.Entry = nullptr;
  F.Graph.Entry = nullptr;
  F.Mode.Entry = nullptr;
  F.KeepsCallerFacts = false;
  return F;
}

bool ValueFacts::dependsOnEntry() const {
  return Device.Entry || Pin.Entry || Graph.Entry || Mode.Entry;
}

template <typename T>
static Sourced<T> joinSourced(const Sourced<T> &A, const Sourced<T> &B) {
  if (!(A.Value == B.Value) || A.AlsoEntry != B.AlsoEntry)
    return {};
  // An entry value known here (a member's class state, what every caller
  // passes) and the same value from elsewhere: that value, whatever entered.
  if (A.Entry != B.Entry && !A.isKnown())
    return {};
  // Keep one origin deterministically: the earlier one in the file.
  Sourced<T> R = A;
  if (B.Origin.isValid() &&
      (!A.Origin.isValid() ||
       B.Origin.getRawEncoding() < A.Origin.getRawEncoding()))
    R = B;
  if (A.Entry != B.Entry)
    R.Entry = nullptr;
  return R;
}

static Implication joinImplications(const Implication &A,
                                    const Implication &B) {
  return {A.Cuda && B.Cuda, std::min(A.CountAtLeast, B.CountAtLeast)};
}

/// A count-or-constants value's alternatives, appended to \p Out; false
/// when \p F is neither a count nor a constant.
static bool countAlternatives(const ScalarFacts &F,
                              llvm::SmallVectorImpl<int64_t> &Out) {
  if (F.IsDeviceCount) {
    Out.append(F.OrKnown.begin(), F.OrKnown.end());
    return true;
  }
  if (F.Known) {
    Out.push_back(*F.Known);
    return true;
  }
  return false;
}

ScalarFacts joinScalars(const ScalarFacts &A, const ScalarFacts &B) {
  /// How many constants a count may stand beside before it is unknown.
  constexpr size_t MaxAlternatives = 4;
  ScalarFacts R;
  if (A.Known == B.Known)
    R.Known = A.Known;
  R.IfTrue = joinImplications(A.IfTrue, B.IfTrue);
  R.IfFalse = joinImplications(A.IfFalse, B.IfFalse);
  auto Vacuous = [&R](const ScalarFacts &Constant, const ScalarFacts &Other) {
    if (!Constant.Known || Other.Known)
      return;
    if (*Constant.Known)
      R.IfFalse = Other.IfFalse;
    else
      R.IfTrue = Other.IfTrue;
  };
  Vacuous(A, B);
  Vacuous(B, A);
  if (A.IsDeviceCount || B.IsDeviceCount) {
    llvm::SmallVector<int64_t, 4> Or;
    if (countAlternatives(A, Or) && countAlternatives(B, Or)) {
      llvm::sort(Or);
      Or.erase(std::unique(Or.begin(), Or.end()), Or.end());
      if (Or.size() <= MaxAlternatives) {
        R.IsDeviceCount = true;
        R.OrKnown.assign(Or.begin(), Or.end());
      }
    }
  }
  if (R.IfTrue.CountAtLeast || R.IfFalse.CountAtLeast)
    R.CountComparison = A.CountComparison ? A.CountComparison : B.CountComparison;
  return R;
}

ValueFacts asEntryValue(ValueFacts F, const ValueDecl &D) {
  F.Pin.Entry = F.Graph.Entry = F.Mode.Entry = &D;
  // Passing a tensor whose copy is pending is the read the caller reports.
  if (isa<ParmVarDecl>(D))
    F.clearPendingCopy();
  if (isDeviceType(D.getType().getNonReferenceType())) {
    // A device variable this TU cannot name is, in a function that takes
    // it as a parameter, that parameter.
    if (!F.Device.Value.isKnown() ||
        (F.Device.Value.isSymbolic() && !F.Device.Value.holder() &&
         isa<ParmVarDecl>(D)))
      F.Device = {DeviceValue::symbolic(&D), D.getLocation()};
  } else {
    F.Device.Entry = &D;
  }
  return F;
}

/// Adds the members of \p From missing from \p Into, keeping Into's order.
template <typename T>
static void unite(llvm::SmallVectorImpl<T> &Into, llvm::ArrayRef<T> From) {
  for (const T &X : From)
    if (!llvm::is_contained(Into, X))
      Into.push_back(X);
}

/// Two devices that are the entry values of different holders, nothing
/// else known: either one (at most two holders).
static Sourced<DeviceValue> eitherEntry(const Sourced<DeviceValue> &A,
                                        const Sourced<DeviceValue> &B) {
  if (A.isKnown() || B.isKnown() || !A.Entry || !B.Entry)
    return {};
  llvm::SmallVector<const ValueDecl *, 4> Holders;
  for (const ValueDecl *E : {A.Entry, A.AlsoEntry, B.Entry, B.AlsoEntry})
    if (E && !llvm::is_contained(Holders, E))
      Holders.push_back(E);
  if (Holders.size() != 2)
    return {};
  Sourced<DeviceValue> R;
  R.Entry = Holders[0];
  R.AlsoEntry = Holders[1];
  R.EitherEntry = true;
  return R;
}

ValueFacts joinFacts(const ValueFacts &A, const ValueFacts &B) {
  if (A.Empty)
    return B;
  if (B.Empty)
    return A;
  ValueFacts R;
  R.Device = joinSourced(A.Device, B.Device);
  if (!R.Device.isKnown() && !R.Device.Entry)
    R.Device = eitherEntry(A.Device, B.Device);
  R.Pin = joinSourced(A.Pin, B.Pin);
  R.Graph = joinSourced(A.Graph, B.Graph);
  R.Mode = joinSourced(A.Mode, B.Mode);
  R.ModeLayers = A.ModeLayers == B.ModeLayers ? A.ModeLayers : Tri::Unknown;
  R.HasParameters =
      A.HasParameters == B.HasParameters ? A.HasParameters : Tri::Unknown;
  // A copy counts as pending only when it is pending on every path; paths
  // that started different copies name the first in the source.
  if (A.PendingCopy.isValid() && B.PendingCopy.isValid()) {
    bool AFirst = A.PendingCopy == B.PendingCopy ||
                  A.PendingCopy.getRawEncoding() < B.PendingCopy.getRawEncoding();
    R.PendingCopy = AFirst ? A.PendingCopy : B.PendingCopy;
    R.PendingVia = A.PendingVia == B.PendingVia ? A.PendingVia : nullptr;
    // Pending on one path whatever the callers pass, on the other if they
    // pass CUDA: pending if they pass CUDA.
    R.PendingIf = A.PendingIf ? A.PendingIf : B.PendingIf;
    if (A.PendingIf && B.PendingIf && A.PendingIf != B.PendingIf)
      R.clearPendingCopy();
  }
  R.MayBeZeroDim = A.MayBeZeroDim || B.MayBeZeroDim;
  R.FromDeviceConflict = A.FromDeviceConflict || B.FromDeviceConflict;
  R.DeviceUnset = A.DeviceUnset && B.DeviceUnset;
  R.KeepsCallerFacts = A.KeepsCallerFacts && B.KeepsCallerFacts;
  R.Scalar = joinScalars(A.Scalar, B.Scalar);
  // What a callable may hold is a "some path" fact; that it holds nothing
  // else needs every path.
  R.Callables = A.Callables;
  unite<const FunctionDecl *>(R.Callables, B.Callables);
  R.CallablesKnown = A.CallablesKnown && B.CallablesKnown;
  R.GraphSources = A.GraphSources;
  for (const Stmt *S : B.GraphSources)
    if (!llvm::is_contained(R.GraphSources, S))
      R.GraphSources.push_back(S);
  return R;
}

/// \p Changed, a value the callee changed in place, over what the caller's
/// storage held before (\p Old): the facts the callee did not establish
/// stay the caller's.
ValueFacts overCallerFacts(ValueFacts Changed, const ValueFacts &Old) {
  auto Keep = [](auto &Fact, const auto &Before) {
    if (!Fact.isKnown() && !Fact.Entry)
      Fact = Before;
  };
  Keep(Changed.Device, Old.Device);
  Keep(Changed.Pin, Old.Pin);
  Keep(Changed.Graph, Old.Graph);
  Keep(Changed.Mode, Old.Mode);
  if (Changed.ModeLayers == Tri::Unknown)
    Changed.ModeLayers = Old.ModeLayers;
  if (Changed.HasParameters == Tri::Unknown)
    Changed.HasParameters = Old.HasParameters;
  if (Changed.Scalar.empty())
    Changed.Scalar = Old.Scalar;
  Changed.MayBeZeroDim = Old.MayBeZeroDim;
  // A reset (`zero_()`) drops the graphs; an accumulation adds to them.
  if (Changed.Graph.Value != GraphState::NoGraph)
    for (const Stmt *Source : Old.GraphSources)
      if (!llvm::is_contained(Changed.GraphSources, Source))
        Changed.GraphSources.push_back(Source);
  Changed.KeepsCallerFacts = Old.KeepsCallerFacts;
  return Changed;
}

//===--- Path facts --------------------------------------------------------===//

bool PathFacts::operator==(const PathFacts &O) const {
  return Cuda == O.Cuda && CountAtLeast == O.CountAtLeast &&
         CudaSelectedBefore == O.CudaSelectedBefore &&
         Grad == O.Grad && GradGuards == O.GradGuards &&
         UncheckedCuda == O.UncheckedCuda && CpuSelections == O.CpuSelections &&
         AvailabilityChecks == O.AvailabilityChecks &&
         GraphsBackpropagated == O.GraphsBackpropagated &&
         EntriesBackpropagated == O.EntriesBackpropagated &&
         BackpropagatedOther == O.BackpropagatedOther &&
         GraphsEscaped == O.GraphsEscaped;
}

static GradMode joinGrad(GradMode A, GradMode B) {
  return A == B ? A : GradMode::Unknown;
}


PathFacts joinPaths(const PathFacts &A, const PathFacts &B, bool AKeptCpu,
                    bool BKeptCpu) {
  PathFacts R;
  R.Cuda = std::min(A.Cuda, B.Cuda);
  R.CudaSelectedBefore = A.CudaSelectedBefore && B.CudaSelectedBefore;
  R.CountAtLeast = std::min(A.CountAtLeast, B.CountAtLeast);
  R.CountProof = A.CountAtLeast <= B.CountAtLeast ? A.CountProof : B.CountProof;
  R.Grad = joinGrad(A.Grad, B.Grad);
  for (const auto &[Var, Mode] : A.GradGuards)
    for (const auto &[OtherVar, OtherMode] : B.GradGuards)
      if (Var == OtherVar)
        R.GradGuards.push_back({Var, joinGrad(Mode, OtherMode)});
  // A CUDA selection unchecked on one path is a fallback to the CPU when the
  // other path made a CPU selection that this one did not: `use_gpu ?
  // kCUDA : kCPU`, `if (flag) x.cuda(); else x.cpu();`.
  auto Unchecked = [](const PathFacts &Mine, const PathFacts &Other,
                      bool OtherKeptCpu, PathFacts &Out) {
    bool OtherFellBack =
        OtherKeptCpu || llvm::any_of(Other.CpuSelections, [&](const Expr *C) {
          return !llvm::is_contained(Mine.CpuSelections, C);
        });
    for (const auto &[Use, Guard] : Mine.UncheckedCuda) {
      if (OtherFellBack && !Other.hasUncheckedCuda(Use))
        continue;
      auto It = llvm::find_if(Out.UncheckedCuda,
                              [&](const auto &U) { return U.first == Use; });
      if (It == Out.UncheckedCuda.end())
        Out.UncheckedCuda.push_back({Use, Guard});
      else
        It->second = std::min(It->second, Guard);
    }
  };
  Unchecked(A, B, BKeptCpu, R);
  Unchecked(B, A, AKeptCpu, R);
  R.CpuSelections.assign(A.CpuSelections.begin(), A.CpuSelections.end());
  unite<const Expr *>(R.CpuSelections, B.CpuSelections);
  R.AvailabilityChecks.assign(A.AvailabilityChecks.begin(),
                              A.AvailabilityChecks.end());
  unite<const Expr *>(R.AvailabilityChecks, B.AvailabilityChecks);
  R.GraphsBackpropagated.assign(A.GraphsBackpropagated.begin(),
                                A.GraphsBackpropagated.end());
  unite<const Stmt *>(R.GraphsBackpropagated, B.GraphsBackpropagated);
  R.EntriesBackpropagated.assign(A.EntriesBackpropagated.begin(),
                                 A.EntriesBackpropagated.end());
  unite<const ValueDecl *>(R.EntriesBackpropagated, B.EntriesBackpropagated);
  R.BackpropagatedOther = A.BackpropagatedOther || B.BackpropagatedOther;
  R.GraphsEscaped.assign(A.GraphsEscaped.begin(), A.GraphsEscaped.end());
  unite<const Stmt *>(R.GraphsEscaped, B.GraphsEscaped);
  return R;
}

//===--- Locations ---------------------------------------------------------===//

Location Location::child(Selector S) const {
  if (!*this || Depth >= MaxDepth)
    return {};
  Location L = *this;
  L.Path[L.Depth++] = S.raw();
  return L;
}

Location Location::parent() const {
  if (Depth == 0)
    return {};
  Location L = *this;
  L.Path[--L.Depth] = 0;
  return L;
}

bool Location::hasPrefix(const Location &Prefix) const {
  if (Root != Prefix.Root || Kind != Prefix.Kind || Depth < Prefix.Depth)
    return false;
  for (unsigned I = 0; I < Prefix.Depth; ++I)
    if (Path[I] != Prefix.Path[I])
      return false;
  return true;
}

Location Location::replacePrefix(const Location &Prefix,
                                 const Location &To) const {
  if (!hasPrefix(Prefix) || !To)
    return {};
  Location L = To;
  for (unsigned I = Prefix.Depth; I < Depth; ++I) {
    L = L.child(Selector::fromRaw(Path[I]));
    if (!L)
      return {};
  }
  return L;
}

Location Location::rebased(const Location &NewRoot) const {
  Location Root = *this;
  while (Root.Depth)
    Root = Root.parent();
  return replacePrefix(Root, NewRoot);
}

bool Location::isElement() const {
  for (unsigned I = 0; I < Depth; ++I)
    if (Selector::fromRaw(Path[I]).isElement())
      return true;
  return false;
}

static unsigned placeOf(const Decl *D) {
  return D ? D->getLocation().getRawEncoding() : 0;
}

static unsigned placeOf(uintptr_t Raw) {
  Selector S = Selector::fromRaw(Raw);
  if (const FieldDecl *F = S.asField())
    return F->getLocation().getRawEncoding();
  return unsigned(Raw);
}

bool Location::operator<(const Location &O) const {
  if (Kind != O.Kind)
    return Kind < O.Kind;
  if (Root != O.Root)
    return placeOf(Root) < placeOf(O.Root);
  for (unsigned I = 0; I < MaxDepth; ++I)
    if (Path[I] != O.Path[I])
      return placeOf(Path[I]) < placeOf(O.Path[I]);
  return false;
}

//===--- State -------------------------------------------------------------===//

const ValueFacts *State::lookup(const Location &L) const {
  auto It = Values.find(L);
  return It == Values.end() ? nullptr : &It->second;
}

ValueFacts State::get(const Location &L) const {
  const ValueFacts *F = lookup(L);
  return F ? *F : ValueFacts();
}

void State::set(const Location &L, const ValueFacts &F) {
  if (!L)
    return;
  if (F.isUnknown())
    Values.erase(L);
  else
    Values[L] = F;
}

void State::joinInto(const Location &L, const ValueFacts &F) {
  if (!L)
    return;
  const ValueFacts *Old = lookup(L);
  // An element that nothing tracks may hold anything already.
  if (!Old)
    return;
  set(L, joinFacts(*Old, F));
}

void State::forget(const Location &L) { Values.erase(L); }

void State::forgetTree(const Location &L) {
  llvm::SmallVector<Location, 4> Doomed;
  for (const auto &Entry : Values)
    if (Entry.first.hasPrefix(L))
      Doomed.push_back(Entry.first);
  for (const Location &D : Doomed)
    Values.erase(D);
}

void State::forgetRoots(Location::RootKind Kind) {
  llvm::SmallVector<Location, 4> Doomed;
  for (const auto &Entry : Values)
    if (Entry.first.Kind == Kind)
      Doomed.push_back(Entry.first);
  for (const Location &D : Doomed)
    Values.erase(D);
}

llvm::SmallVector<Location, 4> State::tree(const Location &L) const {
  llvm::SmallVector<Location, 4> Out;
  for (const auto &Entry : Values)
    if (Entry.first.hasPrefix(L))
      Out.push_back(Entry.first);
  llvm::sort(Out);
  return Out;
}

void State::copyTree(const Location &From, const Location &To) {
  if (!From || !To || From == To)
    return;
  llvm::SmallVector<std::pair<Location, ValueFacts>, 4> Copies;
  for (const auto &Entry : Values)
    if (Location Target = Entry.first.replacePrefix(From, To))
      Copies.push_back({Target, Entry.second});
  forgetTree(To);
  for (auto &[L, F] : Copies)
    set(L, F);
}

void State::completePendingCopies() {
  for (auto &Entry : Values)
    Entry.second.clearPendingCopy();
}

/// The facts of \p L in \p S; a part of the elements of a container that
/// \p S knows to be empty is no value at all (the join's neutral element).
static const ValueFacts *factsOrNone(const State &S, const Location &L) {
  if (const ValueFacts *F = S.lookup(L))
    return F;
  static const ValueFacts None = [] {
    ValueFacts F;
    F.Empty = true;
    return F;
  }();
  for (Location P = L.parent(); P; P = P.parent())
    if (P.last().isElement())
      if (const ValueFacts *F = S.lookup(P); F && F->Empty)
        return &None;
  return nullptr;
}

/// Whether \p Kept holds a CPU selection's value (`device = kCPU`, or a
/// member set so) where \p Moved holds CUDA: \p Moved's path overwrote it.
static bool keptCpuWhereCuda(const State &Kept, const State &Moved) {
  if (Kept.path().CpuSelections.empty())
    return false;
  bool Found = false;
  Moved.forEach([&](const Location &L, const ValueFacts &Facts) {
    if (Found || !Facts.Device.Value.isCUDA())
      return;
    const ValueFacts *There = factsOrNone(Kept, L);
    Found = There && There->Device.Value.isCPU() &&
            llvm::any_of(Kept.path().CpuSelections, [&](const Expr *Selection) {
              return Selection->getBeginLoc() == There->Device.Origin ||
                     Selection->getExprLoc() == There->Device.Origin;
            });
  });
  return Found;
}

bool State::joinWith(const State &Other) {
  bool Changed = false;
  bool MineKeptCpu = keptCpuWhereCuda(*this, Other);
  bool OtherKeptCpu = keptCpuWhereCuda(Other, *this);
  // What this state holds for the locations only the other tracks, read
  // before the joins below forget anything.
  llvm::SmallVector<std::pair<Location, ValueFacts>, 8> Added;
  for (const auto &Entry : Other.Values)
    if (!Values.count(Entry.first)) {
      const ValueFacts *Mine = factsOrNone(*this, Entry.first);
      ValueFacts Joined = joinFacts(Mine ? *Mine : ValueFacts(), Entry.second);
      if (!Joined.isUnknown())
        Added.push_back({Entry.first, std::move(Joined)});
    }
  llvm::SmallVector<Location, 8> Doomed;
  for (auto &Entry : Values) {
    const ValueFacts *OtherFacts = factsOrNone(Other, Entry.first);
    // A location the other path does not track is unknown there: only the
    // "some path" facts (graph sources) survive.
    ValueFacts Joined =
        joinFacts(Entry.second, OtherFacts ? *OtherFacts : ValueFacts());
    if (Joined != Entry.second) {
      Changed = true;
      if (Joined.isUnknown())
        Doomed.push_back(Entry.first);
      else
        Entry.second = Joined;
    }
  }
  for (const Location &L : Doomed)
    Values.erase(L);
  for (auto &[L, Joined] : Added) {
    Values[L] = std::move(Joined);
    Changed = true;
  }
  PathFacts JoinedPath = joinPaths(Path, Other.Path, MineKeptCpu, OtherKeptCpu);
  if (JoinedPath != Path) {
    Path = std::move(JoinedPath);
    Changed = true;
  }
  // A handler entered on one path only still counts (its retry may be
  // behind a flag the join forgets); the writes of both paths count.
  for (const OomRecovery &Theirs : Other.Recoveries) {
    auto Mine = llvm::find_if(Recoveries, [&](const OomRecovery &R) {
      return R.sameHandler(Theirs);
    });
    if (Mine == Recoveries.end()) {
      Recoveries.push_back(Theirs);
      Changed = true;
      continue;
    }
    OomRecovery Joined = *Mine;
    if (!Joined.EmptyCache)
      Joined.EmptyCache = Theirs.EmptyCache;
    Joined.WroteUnknown |= Theirs.WroteUnknown;
    for (const Location &L : Theirs.Written)
      Joined.addWrite(L);
    if (!(Joined == *Mine)) {
      *Mine = std::move(Joined);
      Changed = true;
    }
  }
  return Changed;
}

bool OomRecovery::wrote(const Location &L) const {
  return WroteUnknown || llvm::any_of(Written, [&](const Location &W) {
           return W.hasPrefix(L) || L.hasPrefix(W);
         });
}

void OomRecovery::addWrite(const Location &L) {
  // Locations without a declaration place compare equivalent: test
  // membership, keep the order for output only.
  if (!llvm::is_contained(Written, L))
    Written.insert(llvm::lower_bound(Written, L), L);
}

bool OomRecovery::operator==(const OomRecovery &O) const {
  return Try == O.Try && sameHandler(O) && EmptyCache == O.EmptyCache &&
         WroteUnknown == O.WroteUnknown && Written.size() == O.Written.size() &&
         llvm::all_of(Written, [&](const Location &L) {
           return llvm::is_contained(O.Written, L);
         });
}

bool State::operator==(const State &O) const {
  if (Values.size() != O.Values.size() || Path != O.Path ||
      Recoveries.size() != O.Recoveries.size())
    return false;
  for (const OomRecovery &R : Recoveries)
    if (!llvm::is_contained(O.Recoveries, R))
      return false;
  for (const auto &Entry : Values) {
    const ValueFacts *F = O.lookup(Entry.first);
    if (!F || *F != Entry.second)
      return false;
  }
  return true;
}

} // namespace clang::tidy::torch
