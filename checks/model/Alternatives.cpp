//===--- Alternatives.cpp - torch-tidy ------------------------------------===//
//
// A call that runs one of several functions, the same one every time it
// runs: a virtual call of uncertain target (one object, one dynamic type),
// a callable that holds one of several functions. Unlike two paths, the
// alternatives do not each happen: a fact they disagree on is unknown, not
// true on some path. A member that only some classes have is changed only
// by the overrides that can run on an object of such a class.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "clang/AST/DeclCXX.h"

namespace clang::tidy::torch {

/// The same facts, wherever each came from.
static bool sameFacts(const ValueFacts &A, const ValueFacts &B) {
  return A.Device.Value == B.Device.Value && A.Device.Entry == B.Device.Entry &&
         A.Pin.Value == B.Pin.Value && A.Graph.Value == B.Graph.Value &&
         A.Mode.Value == B.Mode.Value && A.Mode.Entry == B.Mode.Entry &&
         A.ModeLayers == B.ModeLayers && A.HasParameters == B.HasParameters &&
         A.PendingCopy.isValid() == B.PendingCopy.isValid() &&
         A.Callables == B.Callables;
}

/// The class of the member of `*this` that \p L lies in; null otherwise.
static const CXXRecordDecl *memberClass(const Location &L) {
  if (L.Kind != Location::This || !L.Depth)
    return nullptr;
  const FieldDecl *Field = Selector::fromRaw(L.Path[0]).asField();
  return Field ? dyn_cast<CXXRecordDecl>(Field->getParent()) : nullptr;
}

/// Whether the function of class \p Runs may run on an object that has a
/// member of class \p Has, among the alternatives' classes \p All: it is
/// Has's class or a derived one's, or the override Has inherits.
static bool mayRunOn(const CXXRecordDecl *Runs, const CXXRecordDecl *Has,
                     llvm::ArrayRef<const CXXRecordDecl *> All) {
  if (!Runs || !Has || !Runs->hasDefinition() || !Has->hasDefinition())
    return true;
  Runs = Runs->getCanonicalDecl();
  Has = Has->getCanonicalDecl();
  if (Runs == Has || Runs->isDerivedFrom(Has))
    return true;
  if (!Has->isDerivedFrom(Runs))
    return false; // a sibling class: another object
  // Inherited only when no class between them (Has included) overrides.
  return llvm::none_of(All, [&](const CXXRecordDecl *Other) {
    if (!Other || !Other->hasDefinition())
      return false;
    Other = Other->getCanonicalDecl();
    return Other != Runs && (Other == Has || Has->isDerivedFrom(Other)) &&
           Other->isDerivedFrom(Runs);
  });
}

State joinAlternatives(llvm::ArrayRef<Alternative> Results) {
  State Joined = Results.front().After;
  for (const Alternative &A : Results.drop_front())
    Joined.joinWith(A.After);
  llvm::SmallVector<const CXXRecordDecl *, 4> Classes;
  for (const Alternative &A : Results)
    Classes.push_back(A.Class);
  llvm::SmallVector<Location, 8> Seen;
  for (const Alternative &A : Results)
    A.After.forEach([&](const Location &L, const ValueFacts &) {
      Seen.push_back(L);
    });
  llvm::sort(Seen);
  Seen.erase(std::unique(Seen.begin(), Seen.end()), Seen.end());
  for (const Location &L : Seen) {
    const CXXRecordDecl *Has = memberClass(L);
    std::optional<ValueFacts> Value;
    bool Agree = true;
    for (const Alternative &A : Results) {
      if (!mayRunOn(A.Class, Has, Classes))
        continue;
      ValueFacts V = A.After.get(L);
      if (!Value)
        Value = V;
      else if (sameFacts(*Value, V))
        Value = joinFacts(*Value, V);
      else
        Agree = false;
    }
    // A member of another object than the one the call runs on (the
    // caller's own members, for `hook_->on_step()`): no alternative runs
    // on it, and their join stands.
    if (!Value)
      continue;
    if (Agree) {
      Joined.set(L, *Value);
      continue;
    }
    Joined.forget(L);
    if (L.Kind == Location::This)
      Joined.markClobbered(L);
  }
  return Joined;
}

} // namespace clang::tidy::torch
