//===--- FunctionSummary.h - torch-tidy -------------------------*- C++ -*-===//
//
// What the tensor flow analysis proves about a function, in terms of its
// parameters, so that a caller can use it without looking at the body:
//  - the facts of its return value ("a pageable CPU tensor", "its argument
//    moved to `device`", "a module on its `device` parameter");
//  - its effects on reference parameters, on module handles it is given and
//    on the members of `*this`;
//  - the requirements it places on its arguments: operands that it combines
//    must share a device, a tensor it copies with non_blocking should not be
//    pageable;
//  - whether it runs a backward pass, an optimizer step or a
//    synchronisation.
// A summary is computed once per function (ProgramModel), or read from an
// earlier audit (SummaryJson.h) for a function defined in another TU.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_ANALYSIS_FUNCTIONSUMMARY_H
#define TORCH_TIDY_ANALYSIS_FUNCTIONSUMMARY_H

#include "TensorFacts.h"
#include "clang/AST/Decl.h"
#include "llvm/ADT/SmallVector.h"
#include <string>
#include <vector>

namespace clang::tidy::torch {

/// One operand of a requirement, in the callee's terms.
struct RequiredOperand {
  Sourced<DeviceValue> Device;
  /// How notes name it: "'background'".
  std::string Name;
  /// False when the operand provably has a dimension (element-wise
  /// operators accept a 0-dim CPU tensor next to a CUDA one).
  bool MayBeZeroDim = true;
};

/// A condition that the callee's body needs of its arguments.
struct Requirement {
  enum KindType : unsigned char {
    /// `First` and `Second` are combined by one operation: same device.
    SameDevice,
    /// `First` (a tensor) is copied with non_blocking to `Second`'s device
    /// (a device that may be CUDA): it should not be pageable CPU memory.
    PinnedSource,
  } Kind = SameDevice;
  RequiredOperand First, Second;
  /// SameDevice: the operation ("operator '+'", "'at::cat'") or, for a
  /// module call, "" (First is then the module).
  std::string What;
  bool IsModuleCall = false;
  bool AllowsZeroDimCPU = false;
  /// PinnedSource: the parameter that must be pinned.
  const ParmVarDecl *Source = nullptr;
  /// Where the operation is, and the calls (inside the callee) that lead to
  /// it when it sits in a function that the callee calls.
  SourceLocation At;
  const CallStep *Via = nullptr;
};

/// The effect of a call on one storage location the caller can see.
struct SummaryEffect {
  /// A reference parameter or module handle (Field null), or a member of
  /// `*this` (Param null).
  const ParmVarDecl *Param = nullptr;
  const FieldDecl *Field = nullptr;
  /// The location's facts when the function returns; empty: unknown.
  ValueFacts Exit;
};

struct FunctionSummary {
  /// False when nothing is proven: no visible definition, recursion, an
  /// analysis that did not converge. Every fact is then unknown.
  bool Known = false;
  /// Facts of the returned value (tensor, module, device).
  ValueFacts Return;
  llvm::SmallVector<SummaryEffect, 2> Effects;
  std::vector<Requirement> Requirements;
  /// The body provably runs a backward pass / an optimizer step on some
  /// path; the first such call, for notes.
  SourceLocation Backward;
  SourceLocation Step;
  /// Some path synchronises the device with the host.
  bool MaySynchronize = false;
  /// Some path may run a backward pass or a step that the analysis cannot
  /// see (an opaque call that receives a tensor).
  bool MayRunOpaqueBackward = false;

  static FunctionSummary unknown() { return {}; }
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_ANALYSIS_FUNCTIONSUMMARY_H
