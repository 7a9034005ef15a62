//===--- ObligedCallees.h - torch-tidy ------------------------*- C++ -*-===//
//
// The functions a call runs whose obligations apply at it (Judging.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_OBLIGEDCALLEES_H
#define TORCH_TIDY_MODEL_OBLIGEDCALLEES_H

#include "FlowModel.h"
#include "State.h"
#include "llvm/ADT/SmallVector.h"

namespace clang::tidy::torch {

struct FunctionSummary;

/// A function a call runs whose obligations apply at it.
struct ObligedCallee {
  /// Set when the call runs it otherwise than as its callee.
  const FunctionDecl *Target = nullptr;
  const FunctionSummary *Summary = nullptr;
  /// The call's arguments are not the target's (a lambda handed to
  /// std::for_each).
  bool HandedToLibrary = false;
  /// The target runs on the call's object (an override of its callee, a
  /// member function called through `obj->*pm`).
  bool OnObject = false;
  /// The call runs the same target every time it runs (one object's
  /// override, the function one callable holds), not each of them in turn.
  bool SameEachRun = false;
};

/// The functions a call runs whose obligations apply at it: its callee,
/// each callable of a container it calls, and the lambdas it hands to a
/// library function (std::for_each runs them).
llvm::SmallVector<ObligedCallee, 1>
obligedCallees(const Stmt &S, const FlowModel &M, const State &St);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_OBLIGEDCALLEES_H
