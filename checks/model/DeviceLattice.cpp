//===--- DeviceLattice.cpp - torch-tidy -----------------------------------===//

#include "DeviceLattice.h"
#include "api/TorchMatchers.h"
#include "clang/AST/Decl.h"

namespace clang::tidy::torch {

std::string DeviceValue::describe() const {
  switch (K) {
  case Kind::Unknown:
    return "an unknown device";
  case Kind::CPU:
    return "CPU";
  case Kind::CUDA:
    return Ordinal < 0 ? "CUDA" : "cuda:" + std::to_string(Ordinal);
  case Kind::Other:
    return "a non-CUDA accelerator";
  case Kind::Symbolic:
    if (!Holder)
      return Described ? Described : "a device variable";
    // "Whatever a function returns": the device of its result.
    if (const auto *F = dyn_cast<FunctionDecl>(Holder);
        F && !isDeviceType(F->getReturnType()))
      return "the device of '" + F->getNameAsString() + "()'";
    return "'" + Holder->getNameAsString() + "'";
  }
  return "";
}

DeviceValue joinDevices(const DeviceValue &A, const DeviceValue &B) {
  return A == B ? A : DeviceValue::unknown();
}

DeviceConflict compareDevices(const DeviceValue &A, const DeviceValue &B) {
  if (!A.isKnown() || !B.isKnown() || A == B)
    return DeviceConflict::None;
  if (A.isSymbolic() || B.isSymbolic()) {
    // Two different device variables may well hold the same device.
    const DeviceValue &Other = A.isSymbolic() ? B : A;
    return Other.isCPU() ? DeviceConflict::OnAcceleratorMachine
                         : DeviceConflict::None;
  }
  // An unspecified CUDA ordinal is the current device, often ordinal 0:
  // only two explicit, different ordinals are a proven conflict.
  if (A.isCUDA() && B.isCUDA())
    return A.ordinal() >= 0 && B.ordinal() >= 0 ? DeviceConflict::Always
                                                : DeviceConflict::None;
  return DeviceConflict::Always;
}

} // namespace clang::tidy::torch
