//===--- State.h - torch-tidy -----------------------------------*- C++ -*-===//
//
// The abstract store of the dataflow engine: a Location names where a value
// lives (a local or parameter, a member of `*this`, a global, the returned
// value), down a short path of fields, tuple elements and container
// elements; the State maps locations to their facts and carries the path
// facts.
//
// A container's elements are one location ("any element"): a write joins
// into it (a weak update), and a read gets the join of what was written.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_STATE_H
#define TORCH_TIDY_MODEL_STATE_H

#include "Facts.h"
#include "clang/AST/StmtCXX.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/Hashing.h"
#include <array>
#include <cstdint>

namespace clang::tidy::torch {

/// One step from a value to a part of it.
class Selector {
public:
  static Selector field(const FieldDecl *F) {
    return Selector(reinterpret_cast<uintptr_t>(F));
  }
  static Selector element() { return Selector(ElementTag); }
  static Selector tupleElement(unsigned Index) {
    return Selector((uintptr_t(Index) << 3) | TupleTag);
  }
  static Selector fromRaw(uintptr_t Raw) { return Selector(Raw); }

  const FieldDecl *asField() const {
    return isField() ? reinterpret_cast<const FieldDecl *>(Raw) : nullptr;
  }
  bool isField() const { return Raw && (Raw & 7) == 0; }
  bool isElement() const { return Raw == ElementTag; }
  bool isTupleElement() const { return (Raw & 7) == TupleTag; }
  unsigned tupleIndex() const { return unsigned(Raw >> 3); }
  uintptr_t raw() const { return Raw; }
  bool operator==(const Selector &O) const { return Raw == O.Raw; }

private:
  static constexpr uintptr_t ElementTag = 1, TupleTag = 2;
  explicit Selector(uintptr_t Raw) : Raw(Raw) {}
  uintptr_t Raw = 0;
};

struct Location {
  enum RootKind : unsigned char {
    None,
    /// A local variable or a parameter (Root).
    Local,
    /// `*this` of the function (Root null).
    This,
    /// A namespace-scope, static-member or static local variable (Root).
    Global,
    /// The function's return value (Root null): summaries only.
    Return,
  };
  static constexpr unsigned MaxDepth = 3;

  const ValueDecl *Root = nullptr;
  RootKind Kind = None;
  unsigned char Depth = 0;
  std::array<uintptr_t, MaxDepth> Path{};

  static Location local(const ValueDecl *D) { return {D, Local}; }
  static Location global(const ValueDecl *D) { return {D, Global}; }
  static Location thisObject() { return {nullptr, This}; }
  static Location returned() { return {nullptr, Return}; }
  static Location member(const FieldDecl *F) {
    return thisObject().child(Selector::field(F));
  }

  explicit operator bool() const { return Kind != None; }
  /// The location of a part; invalid when the path would be too deep.
  Location child(Selector S) const;
  /// The same path under another root.
  Location rebased(const Location &NewRoot) const;
  /// The path below \p Prefix, appended to \p To; invalid when \p Prefix is
  /// not a prefix of this location.
  Location replacePrefix(const Location &Prefix, const Location &To) const;
  bool hasPrefix(const Location &Prefix) const;
  Selector last() const { return Selector::fromRaw(Depth ? Path[Depth - 1] : 0); }
  Location parent() const;
  /// The field a member of `*this` (depth 1) names.
  const FieldDecl *memberField() const {
    return Kind == This && Depth == 1 ? last().asField() : nullptr;
  }
  /// Whether the location is, or lies inside, a container's elements.
  bool isElement() const;

  bool operator==(const Location &O) const {
    return Root == O.Root && Kind == O.Kind && Depth == O.Depth &&
           Path == O.Path;
  }
  bool operator!=(const Location &O) const { return !(*this == O); }
  /// A deterministic order (by declaration place), for output.
  bool operator<(const Location &O) const;
};

} // namespace clang::tidy::torch

namespace llvm {
template <> struct DenseMapInfo<clang::tidy::torch::Location> {
  using Loc = clang::tidy::torch::Location;
  static Loc getEmptyKey() {
    Loc L;
    L.Kind = Loc::RootKind(0xfe);
    return L;
  }
  static Loc getTombstoneKey() {
    Loc L;
    L.Kind = Loc::RootKind(0xff);
    return L;
  }
  static unsigned getHashValue(const Loc &L) {
    return unsigned(hash_combine(L.Root, unsigned(L.Kind), L.Depth, L.Path[0],
                                 L.Path[1], L.Path[2]));
  }
  static bool isEqual(const Loc &A, const Loc &B) { return A == B; }
};
} // namespace llvm

namespace clang::tidy::torch {

/// A path that entered an out-of-memory handler: what it wrote since, so that
/// a later run of the failed work can be told to run at the same size.
struct OomRecovery {
  /// The try block whose work failed; null when the handler ran in a callee.
  const CXXTryStmt *Try = nullptr;
  const CXXCatchStmt *Handler = nullptr;
  /// For a handler in a callee: the call that returned from it and whose
  /// result tells the failure; that call is the work.
  const CallExpr *FailedCall = nullptr;
  /// The handler's emptyCache(), once it ran (on some path).
  const CallExpr *EmptyCache = nullptr;
  /// Storage written since the handler began (a set).
  llvm::SmallVector<Location, 4> Written;
  /// Something was written that the model cannot place.
  bool WroteUnknown = false;

  /// Whether \p L, or a part of it or what it is part of, was written.
  bool wrote(const Location &L) const;
  void addWrite(const Location &L);
  bool operator==(const OomRecovery &O) const;
  bool sameHandler(const OomRecovery &O) const {
    return Handler == O.Handler && FailedCall == O.FailedCall;
  }
};

/// Facts for every tracked location, and the path facts.
class State {
public:
  const ValueFacts *lookup(const Location &L) const;
  /// The facts of \p L; unknown when nothing is tracked.
  ValueFacts get(const Location &L) const;
  void set(const Location &L, const ValueFacts &Facts);
  /// A write to a container's elements: joined into what they hold.
  void joinInto(const Location &L, const ValueFacts &Facts);
  void forget(const Location &L);
  /// Forgets \p L and everything inside it.
  void forgetTree(const Location &L);
  /// Forgets every location of \p Kind (every member, every global).
  void forgetRoots(Location::RootKind Kind);
  /// Copies the facts of \p From and everything inside it to \p To.
  void copyTree(const Location &From, const Location &To);
  /// Calls \p F on every tracked location and its facts, in no fixed order.
  template <typename Fn> void forEach(Fn F) const {
    for (const auto &Entry : Values)
      F(Entry.first, Entry.second);
  }
  /// The locations inside \p L (itself included), sorted.
  llvm::SmallVector<Location, 4> tree(const Location &L) const;

  /// A synchronisation completed every pending device-to-host copy.
  void completePendingCopies();

  PathFacts &path() { return Path; }
  const PathFacts &path() const { return Path; }

  /// The out-of-memory handlers some path to here entered (joined by
  /// handler: the writes of every path, the emptyCache() of any).
  llvm::SmallVectorImpl<OomRecovery> &recoveries() { return Recoveries; }
  const llvm::SmallVectorImpl<OomRecovery> &recoveries() const {
    return Recoveries;
  }

  /// Storage of `*this` that some path made unknown without the values
  /// showing it: the whole object after a user method with no summary (the
  /// members a derived class adds, which no location here names), a member
  /// the overrides of a virtual hook disagree on. A summary reports them as
  /// clobbered. Sorted.
  void markClobbered(const Location &L);
  llvm::ArrayRef<Location> clobbered() const { return Clobbered; }

  /// Merges \p Other into this state; returns true when this state changed.
  bool joinWith(const State &Other);
  /// The same, where a location that one side lacks and \p HeldAtEntry
  /// accepts (another function's variable a hook captured) stands for what
  /// it held at entry on that side, not for an unknown value.
  void joinWith(const State &Other,
                llvm::function_ref<bool(const Location &)> HeldAtEntry);
  bool operator==(const State &O) const;
  size_t size() const { return Values.size(); }

private:
  llvm::DenseMap<Location, ValueFacts> Values;
  PathFacts Path;
  llvm::SmallVector<OomRecovery, 0> Recoveries;
  llvm::SmallVector<Location, 0> Clobbered;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_STATE_H
