//===--- DeviceLattice.h - torch-tidy ---------------------------*- C++ -*-===//
//
// The device a tensor, a module's parameters or a TensorOptions value is on,
// as far as one function proves it.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_DEVICELATTICE_H
#define TORCH_TIDY_MODEL_DEVICELATTICE_H

#include "clang/AST/Decl.h"
#include <string>

namespace clang::tidy::torch {

/// An element of the device lattice:
///
///   CPU, CUDA (ordinal known or not), Other (MPS, meta, ...):
///       a device proven on every path;
///   Symbolic(d): "whatever the torch::Device `d` holds", where `d` is a
///       variable, parameter, member or helper function whose value is not a
///       constant. Such a variable exists to hold an accelerator. One of
///       another TU, which this TU cannot name, keeps only its description.
///   Unknown: anything else; the top of the lattice. Never warns.
class DeviceValue {
public:
  enum class Kind : unsigned char { Unknown, CPU, CUDA, Other, Symbolic };

  /// Unknown.
  DeviceValue() = default;

  static DeviceValue unknown() { return DeviceValue(); }
  static DeviceValue cpu() { return DeviceValue(Kind::CPU); }
  static DeviceValue cuda(int Ordinal = -1) {
    DeviceValue V(Kind::CUDA);
    V.Ordinal = Ordinal;
    return V;
  }
  static DeviceValue other() { return DeviceValue(Kind::Other); }
  static DeviceValue symbolic(const NamedDecl *Holder) {
    DeviceValue V(Kind::Symbolic);
    V.Holder = Holder;
    return V;
  }
  /// A device variable of another TU, as describe() named it there.
  /// \p Described must outlive the value (an interned string).
  static DeviceValue symbolicElsewhere(const char *Described) {
    DeviceValue V(Kind::Symbolic);
    V.Described = Described;
    return V;
  }

  Kind kind() const { return K; }
  bool isKnown() const { return K != Kind::Unknown; }
  bool isCPU() const { return K == Kind::CPU; }
  bool isCUDA() const { return K == Kind::CUDA; }
  bool isSymbolic() const { return K == Kind::Symbolic; }
  /// True for CUDA and for a symbolic device, which may hold CUDA.
  bool mayBeCUDA() const { return isCUDA() || isSymbolic(); }
  /// The CUDA ordinal, or -1 when unspecified (the current device).
  int ordinal() const { return Ordinal; }
  /// The declaration holding a symbolic device; null for one of another TU.
  const NamedDecl *holder() const { return Holder; }

  /// How warnings name it: "CPU", "CUDA", "cuda:1", "'device'".
  std::string describe() const;

  bool operator==(const DeviceValue &O) const {
    return K == O.K && Ordinal == O.Ordinal && Holder == O.Holder &&
           Described == O.Described;
  }
  bool operator!=(const DeviceValue &O) const { return !(*this == O); }

private:
  explicit DeviceValue(Kind K) : K(K) {}

  Kind K = Kind::Unknown;
  int Ordinal = -1;
  const NamedDecl *Holder = nullptr;
  const char *Described = nullptr;
};

/// The merge of two paths: equal devices stay, different ones are Unknown.
DeviceValue joinDevices(const DeviceValue &A, const DeviceValue &B);

/// Whether two operands can be proven to sit on different devices.
enum class DeviceConflict {
  /// Same device, or not provable.
  None,
  /// Different concrete devices: fails on every machine.
  Always,
  /// A symbolic device against the CPU: fails on a machine where the
  /// symbolic device holds CUDA.
  OnAcceleratorMachine,
};

DeviceConflict compareDevices(const DeviceValue &A, const DeviceValue &B);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_DEVICELATTICE_H
