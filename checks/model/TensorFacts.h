//===--- TensorFacts.h - torch-tidy -----------------------------*- C++ -*-===//
//
// What the flow analysis knows about one value (a tensor, a module handle, a
// torch::Device, a TensorOptions or a bool) at one program point, and the
// state that maps tracked storage locations to those facts.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_ANALYSIS_TENSORFACTS_H
#define TORCH_TIDY_ANALYSIS_TENSORFACTS_H

#include "DeviceLattice.h"
#include "clang/AST/Decl.h"
#include "clang/AST/Expr.h"
#include "clang/Basic/SourceLocation.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/DenseMap.h"
#include <optional>

namespace clang::tidy::torch {

/// Whether host memory is page-locked.
enum class Pinning : unsigned char { Unknown, Pinned, Pageable };

/// Whether a tensor keeps an autograd graph alive.
enum class GraphState : unsigned char { Unknown, InGraph, NoGraph };

/// One step of the path by which a fact crossed calls: the call, in the
/// caller, of the function whose code established it. Steps are interned by
/// the ProgramModel and live as long as it; a path lists the outermost call
/// first.
struct CallStep {
  SourceLocation Call;
  /// How notes name the callee: "'make_background()'".
  llvm::StringRef Callee;
  const CallStep *Next = nullptr;
};

/// One fact with the place that established it, for notes.
///
/// In a function's own analysis a fact may stand for "whatever parameter
/// `Param` held at entry" (Value is then the top of its lattice): function
/// summaries are written in those terms and instantiated at each call.
template <typename T> struct Sourced {
  T Value{};
  SourceLocation Origin;
  const ParmVarDecl *Param = nullptr;
  /// The calls through which the fact reached this function; null when it
  /// was established here.
  const CallStep *Via = nullptr;
  bool operator==(const Sourced &O) const {
    return Value == O.Value && Param == O.Param;
  }
  /// Stands for a parameter's value at entry.
  bool isParametric() const { return Param != nullptr; }
};

struct ValueFacts {
  Sourced<DeviceValue> Device{DeviceValue::unknown(), {}};
  Sourced<Pinning> Pin{Pinning::Unknown, {}};
  Sourced<GraphState> Graph{GraphState::Unknown, {}};
  /// A non-blocking device-to-host copy that produced this value and that no
  /// synchronisation has completed yet; null otherwise.
  const Expr *PendingDeviceToHostCopy = nullptr;
  /// False when the tensor provably has at least one dimension; a 0-dim CPU
  /// tensor may be combined with CUDA tensors by element-wise operators.
  bool MayBeZeroDim = true;
  /// The value of a bool variable, when constant.
  std::optional<bool> BoolValue;
  /// A TensorOptions value that provably names no device: factories then
  /// allocate on the CPU, and `.to(options)` keeps the tensor's device.
  bool DeviceUnset = false;

  bool operator==(const ValueFacts &O) const {
    return Device == O.Device && Pin == O.Pin && Graph == O.Graph &&
           PendingDeviceToHostCopy == O.PendingDeviceToHostCopy &&
           MayBeZeroDim == O.MayBeZeroDim && BoolValue == O.BoolValue &&
           DeviceUnset == O.DeviceUnset;
  }
  bool operator!=(const ValueFacts &O) const { return !(*this == O); }
  bool isEmpty() const { return *this == ValueFacts(); }

  /// "Whatever \p P held at entry", for every fact that a call can carry.
  static ValueFacts ofParameter(const ParmVarDecl &P);
  /// These facts with every parameter's value replaced by "unknown": for
  /// facts that outlive the function (a member a constructor sets).
  ValueFacts withoutParameters() const;
};

/// Merges the facts of two paths: what both prove survives.
ValueFacts joinFacts(const ValueFacts &A, const ValueFacts &B);

/// A tracked storage location: a local or parameter (`Base`), a member of
/// `this` (`Field` alone), or one field of a local (`batch.data`).
struct ValueKey {
  const ValueDecl *Base = nullptr;
  const FieldDecl *Field = nullptr;
  bool operator==(const ValueKey &O) const {
    return Base == O.Base && Field == O.Field;
  }
  explicit operator bool() const { return Base || Field; }
};

} // namespace clang::tidy::torch

namespace llvm {
template <> struct DenseMapInfo<clang::tidy::torch::ValueKey> {
  using Key = clang::tidy::torch::ValueKey;
  using PtrInfo = DenseMapInfo<const void *>;
  static Key getEmptyKey() {
    return {static_cast<const clang::ValueDecl *>(PtrInfo::getEmptyKey()),
            nullptr};
  }
  static Key getTombstoneKey() {
    return {static_cast<const clang::ValueDecl *>(PtrInfo::getTombstoneKey()),
            nullptr};
  }
  static unsigned getHashValue(const Key &K) {
    return detail::combineHashValue(PtrInfo::getHashValue(K.Base),
                                    PtrInfo::getHashValue(K.Field));
  }
  static bool isEqual(const Key &A, const Key &B) { return A == B; }
};
} // namespace llvm

namespace clang::tidy::torch {

/// Facts for every tracked location; a missing key means "nothing known".
class TensorState {
public:
  const ValueFacts *lookup(ValueKey Key) const;
  ValueFacts get(ValueKey Key) const;
  void set(ValueKey Key, const ValueFacts &Facts);
  void forget(ValueKey Key);
  /// Forgets every field of \p Base too (after the whole object changed).
  void forgetObject(const ValueDecl *Base);
  /// Forgets every member of `*this`.
  void forgetMembers() { forgetObject(nullptr); }
  /// Calls \p Fn on every tracked location and its facts.
  template <typename Fn> void forEach(Fn F) const {
    for (const auto &Entry : Facts)
      F(Entry.first, Entry.second);
  }
  /// A synchronisation completed every pending device-to-host copy.
  void completePendingCopies();
  /// Whether any tracked value still waits for a device-to-host copy.
  bool hasPendingCopies() const;

  /// Merges \p Other into this state; returns true when this state changed.
  bool joinWith(const TensorState &Other);
  bool operator==(const TensorState &O) const;
  size_t size() const { return Facts.size(); }

private:
  llvm::DenseMap<ValueKey, ValueFacts> Facts;
};

} // namespace clang::tidy::torch


#endif // TORCH_TIDY_ANALYSIS_TENSORFACTS_H
