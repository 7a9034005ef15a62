//===--- TensorFacts.cpp - torch-tidy -------------------------------------===//

#include "TensorFacts.h"
#include "llvm/ADT/SmallVector.h"

namespace clang::tidy::torch {

template <typename T>
static Sourced<T> joinSourced(const Sourced<T> &A, const Sourced<T> &B,
                              const T &Top) {
  if (!(A.Value == B.Value))
    return {Top, {}};
  // Keep one origin deterministically: the earlier one in the file.
  if (B.Origin.isValid() &&
      (!A.Origin.isValid() ||
       B.Origin.getRawEncoding() < A.Origin.getRawEncoding()))
    return B;
  return A;
}

ValueFacts ValueFacts::ofParameter(const ParmVarDecl &P) {
  ValueFacts F;
  F.Device.Param = &P;
  F.Pin.Param = &P;
  F.Graph.Param = &P;
  return F;
}

ValueFacts ValueFacts::withoutParameters() const {
  ValueFacts F = *this;
  if (F.Device.Param)
    F.Device = {};
  if (F.Pin.Param)
    F.Pin = {};
  if (F.Graph.Param)
    F.Graph = {};
  return F;
}

ValueFacts joinFacts(const ValueFacts &A, const ValueFacts &B) {
  ValueFacts R;
  R.Device = joinSourced(A.Device, B.Device, DeviceValue::unknown());
  R.Pin = joinSourced(A.Pin, B.Pin, Pinning::Unknown);
  R.Graph = joinSourced(A.Graph, B.Graph, GraphState::Unknown);
  // A copy counts as pending only when it is pending on every path.
  R.PendingDeviceToHostCopy =
      A.PendingDeviceToHostCopy == B.PendingDeviceToHostCopy
          ? A.PendingDeviceToHostCopy
          : nullptr;
  R.MayBeZeroDim = A.MayBeZeroDim || B.MayBeZeroDim;
  R.BoolValue = A.BoolValue == B.BoolValue ? A.BoolValue : std::nullopt;
  R.DeviceUnset = A.DeviceUnset && B.DeviceUnset;
  return R;
}

const ValueFacts *TensorState::lookup(ValueKey Key) const {
  auto It = Facts.find(Key);
  return It == Facts.end() ? nullptr : &It->second;
}

ValueFacts TensorState::get(ValueKey Key) const {
  const ValueFacts *F = lookup(Key);
  return F ? *F : ValueFacts();
}

void TensorState::set(ValueKey Key, const ValueFacts &F) {
  if (F.isEmpty())
    Facts.erase(Key);
  else
    Facts[Key] = F;
}

void TensorState::forget(ValueKey Key) { Facts.erase(Key); }

void TensorState::forgetObject(const ValueDecl *Base) {
  llvm::SmallVector<ValueKey, 4> Doomed;
  for (const auto &Entry : Facts)
    if (Entry.first.Base == Base)
      Doomed.push_back(Entry.first);
  for (ValueKey K : Doomed)
    Facts.erase(K);
}

void TensorState::completePendingCopies() {
  for (auto &Entry : Facts)
    Entry.second.PendingDeviceToHostCopy = nullptr;
}

bool TensorState::hasPendingCopies() const {
  for (const auto &Entry : Facts)
    if (Entry.second.PendingDeviceToHostCopy)
      return true;
  return false;
}

bool TensorState::joinWith(const TensorState &Other) {
  bool Changed = false;
  llvm::SmallVector<ValueKey, 8> Doomed;
  for (auto &Entry : Facts) {
    const ValueFacts *OtherFacts = Other.lookup(Entry.first);
    ValueFacts Joined =
        OtherFacts ? joinFacts(Entry.second, *OtherFacts) : ValueFacts();
    if (Joined != Entry.second) {
      Changed = true;
      if (Joined.isEmpty())
        Doomed.push_back(Entry.first);
      else
        Entry.second = Joined;
    }
  }
  for (ValueKey K : Doomed)
    Facts.erase(K);
  return Changed;
}

bool TensorState::operator==(const TensorState &O) const {
  if (Facts.size() != O.Facts.size())
    return false;
  for (const auto &Entry : Facts) {
    const ValueFacts *F = O.lookup(Entry.first);
    if (!F || *F != Entry.second)
      return false;
  }
  return true;
}

} // namespace clang::tidy::torch
