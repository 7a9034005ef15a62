//===--- Requirement.cpp - torch-tidy -------------------------------------===//
//
// The registry of requirements and the judgements that several share
// (Requirement.h); Judging.cpp judges them over the analyses.
//
//===----------------------------------------------------------------------===//

#include "Requirement.h"
#include "DeviceLattice.h"

namespace clang::tidy::torch {

//===--- The registry ------------------------------------------------------===//

Requirement::~Requirement() = default;

static std::vector<const Requirement *> &registry() {
  static std::vector<const Requirement *> All;
  return All;
}

RequirementRegistration::RequirementRegistration(const Requirement &R) {
  registry().push_back(&R);
}

llvm::ArrayRef<const Requirement *> Requirement::all() { return registry(); }

const Requirement *Requirement::named(llvm::StringRef Name) {
  for (const Requirement *R : registry())
    if (R->name() == Name)
      return R;
  return nullptr;
}

//===--- Shared judgements -------------------------------------------------===//

Verdict judgeSameDevice(const ValueFacts &A, const ValueFacts &B,
                        bool AllowsZeroDimCPU) {
  // A value of an operation already reported as a mismatch.
  if (A.FromDeviceConflict || B.FromDeviceConflict)
    return Verdict::Holds;
  bool EntryA = isCallerEntry(A.Device);
  bool EntryB = isCallerEntry(B.Device);
  if (EntryA || EntryB) {
    // The callers pass the values: the same parameter twice always agrees;
    // otherwise they decide.
    if (EntryA && EntryB)
      return A.Device.Entry == B.Device.Entry ? Verdict::Holds
                                              : Verdict::Callers;
    const ValueFacts &Known = EntryA ? B : A;
    return Known.Device.Value.isKnown() ? Verdict::Callers : Verdict::Holds;
  }
  if (compareDevices(A.Device.Value, B.Device.Value) == DeviceConflict::None)
    return Verdict::Holds;
  if (AllowsZeroDimCPU && ((A.Device.Value.isCPU() && A.mayBeZeroDim()) ||
                           (B.Device.Value.isCPU() && B.mayBeZeroDim())))
    return Verdict::Holds;
  return Verdict::Violated;
}

void inheritLoopContext(LoopContext &C, const LoopContext &Caller) {
  if (C.TrainingLoop.isInvalid() && C.EveryCall) {
    C.TrainingLoop = Caller.TrainingLoop;
    C.TrainingCall = Caller.TrainingCall;
    C.TrainingCallee = Caller.TrainingCallee;
    C.EveryCall = Caller.EveryCall;
  }
  if (C.Loop.isInvalid()) {
    C.Loop = Caller.Loop;
    C.LoopWithoutBackward = Caller.LoopWithoutBackward;
  }
}

} // namespace clang::tidy::torch
