//===--- Summary.h - torch-tidy ---------------------------------*- C++ -*-===//
//
// What the engine proves about a function, in terms of its entry values, so
// that a caller can use it without looking at the body:
//  - the facts of its return value, part by part for tuples and aggregates;
//  - its effects on what the caller can see: reference parameters and the
//    module handles it is given, the members of `*this`, globals, the
//    variables a lambda captures by reference;
//  - its effect on the path: autograd left switched off, for example;
//  - the requirements it could not decide (obligations), for the caller to
//    judge with its arguments;
//  - whether it runs a backward pass, an optimizer step or a
//    synchronisation.
// A summary is computed once per function (ProgramModel), or read from an
// earlier audit for a function defined in another TU.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_SUMMARY_H
#define TORCH_TIDY_MODEL_SUMMARY_H

#include "Requirement.h"
#include "State.h"
#include <vector>

namespace clang::tidy::torch {

/// The facts a location holds when the function returns; unknown facts are
/// not listed.
struct SummaryEffect {
  /// In the callee's terms: a parameter (Local root), a member of `*this`,
  /// a global, a captured variable; or, for Returns, the returned value.
  Location Where;
  ValueFacts Exit;
};

struct FunctionSummary {
  /// False when nothing is proven: no visible definition, recursion, an
  /// analysis that did not converge. Every fact is then unknown.
  bool Known = false;
  /// The returned value and its parts (Location::returned() roots).
  std::vector<SummaryEffect> Returns;
  /// What every return returns, when it is storage of the caller's: a
  /// member of `*this`, a parameter's part, a reference parameter (a getter
  /// returns `batches_`; `return *this;`).
  Location ReturnedStorage;
  std::vector<SummaryEffect> Effects;
  /// Locations the function may change in ways the summary does not prove:
  /// the caller forgets them.
  std::vector<Location> Clobbers;
  /// Some path selects CUDA where the callers did not check it: a later
  /// selection on the caller's path is that path's second.
  bool SelectsCuda = false;
  /// Grad mode when the function returns, when it changes it.
  GradMode ExitGrad = GradMode::Entry;
  std::vector<Obligation> Obligations;
  /// The body provably runs a backward pass / an optimizer step / a
  /// gradient reset on some path; the first such call, for notes.
  SourceLocation Backward;
  SourceLocation Step;
  /// When BackwardEntriesKnown, the backward passes reach the callers'
  /// graphs only through these entry values (`e.backward()` on a parameter
  /// reaches the graph of its argument and no other argument's).
  llvm::SmallVector<const ValueDecl *, 2> BackwardEntries;
  bool BackwardEntriesKnown = false;
  /// A backward pass or a step runs outside every loop of the body (a
  /// per-step helper): the caller's loop around a call is a training loop.
  bool TrainsPerCall = false;
  /// Some path returns from an out-of-memory handler that emptied the cache:
  /// that handler and its emptyCache() (this TU only; not exported).
  const CXXCatchStmt *OomHandler = nullptr;
  const CallExpr *OomEmptyCache = nullptr;
  /// Some path synchronises the device with the host.
  bool MaySynchronize = false;
  /// What it does to the gradients: every path resets them, or steps or
  /// resets them; some path rescales them. The places (for notes) of a step
  /// that no reset followed, a step, and a backward() that no step or reset
  /// followed, on some path to the exit; invalid when there is none.
  bool ResetsGradients = false;
  bool SettlesGradients = false;
  bool RescalesGradients = false;
  SourceLocation StepWithoutReset, StepRun, BackwardNotStepped;
  /// Some path branches on a counter: what it leaves pending, it leaves by
  /// design (gradient accumulation), not by skipping an iteration.
  bool CountsIterations = false;
  /// Autocast as the paths leave it (Entry: untouched; On: on some path),
  /// and whether in float16 (AsEntry: if the caller's CUDA dtype is).
  AutocastState AutocastAtExit = AutocastState::Entry;
  /// For AsParameter: the index of the bool parameter.
  int AutocastParam = -1;
  bool AutocastHalf = false, AutocastHalfAsEntry = false;
  /// Some path switches autocast on (itself or through a call): a helper
  /// that opens a region of its own, not one that only closes the caller's.
  bool OpensAutocast = false;
  /// Some path sets CUDA autocast's dtype: float16 or not, over the paths
  /// that set it (Unknown: a run-time value, or paths that disagree);
  /// KeepsEntry: some other path leaves the callers' dtype.
  bool SetsCudaDtype = false;
  Tri CudaDtypeHalf = Tri::Unknown;
  bool KeepsEntryCudaDtype = false;
  /// Some path may run a backward pass or a step that the analysis cannot
  /// see (an opaque call that receives a tensor).
  bool MayRunOpaqueBackward = false;
  /// Some path leaves by an exception: a throw, or a call that may throw,
  /// that no try block of its own catches.
  bool MayThrow = false;
  /// Some path may switch any module's mode (PathFacts::ModesClobbered).
  bool ClobbersModes = false;
  /// Some path runs a layer of `*this` (a module's own `decode()`): a call
  /// of it runs the module (FlowModel::runsModule).
  bool RunsOwnLayers = false;

  /// The function changes nothing its callers see: it only computes what
  /// it returns (a caller that discards the result loses all it did). A
  /// CUDA selection or a synchronisation is how it computes, not what.
  bool leavesNoTrace() const {
    return Known && Effects.empty() && Clobbers.empty() &&
           ExitGrad == GradMode::Entry && Backward.isInvalid() &&
           Step.isInvalid() && !ResetsGradients &&
           !SettlesGradients && !RescalesGradients &&
           AutocastAtExit == AutocastState::Entry && !SetsCudaDtype &&
           !MayRunOpaqueBackward && !ClobbersModes;
  }

  /// The facts of the returned value itself.
  ValueFacts returned() const {
    for (const SummaryEffect &R : Returns)
      if (R.Where.Depth == 0)
        return R.Exit;
    return ValueFacts();
  }
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_SUMMARY_H
