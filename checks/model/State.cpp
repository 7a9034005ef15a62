//===--- State.cpp - torch-tidy -------------------------------------------===//
//
// Locations (the storage a fact describes) and the abstract store that maps
// them to facts: lookup, update, trees of parts, and the join of two paths.
//
//===----------------------------------------------------------------------===//

#include "State.h"
#include "llvm/ADT/STLExtras.h"

namespace clang::tidy::torch {

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

void State::joinWith(const State &Other,
                     llvm::function_ref<bool(const Location &)> HeldAtEntry) {
  auto AtEntry = [&](State &Missing, const State &Has) {
    Has.forEach([&](const Location &L, const ValueFacts &) {
      if (HeldAtEntry(L) && !Missing.lookup(L))
        Missing.set(L, ValueFacts::atEntry(*L.Root));
    });
  };
  AtEntry(*this, Other);
  bool OtherMisses = false;
  forEach([&](const Location &L, const ValueFacts &) {
    OtherMisses |= HeldAtEntry(L) && !Other.lookup(L);
  });
  if (!OtherMisses) {
    joinWith(Other);
    return;
  }
  State Filled = Other;
  AtEntry(Filled, *this);
  joinWith(Filled);
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
  for (const Location &L : Other.Clobbered)
    if (!llvm::is_contained(Clobbered, L)) {
      markClobbered(L);
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

void State::markClobbered(const Location &L) {
  if (llvm::is_contained(Clobbered, L))
    return;
  Clobbered.insert(llvm::upper_bound(Clobbered, L), L);
}

bool State::operator==(const State &O) const {
  if (Values.size() != O.Values.size() || Path != O.Path ||
      Recoveries.size() != O.Recoveries.size() || Clobbered != O.Clobbered)
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
