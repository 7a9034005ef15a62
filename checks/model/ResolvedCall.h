//===--- ResolvedCall.h - torch-tidy ----------------------------*- C++ -*-===//
//
// What a call runs, and with which arguments and object: the vocabulary the
// transfer functions and the summaries share about calls.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_RESOLVEDCALL_H
#define TORCH_TIDY_MODEL_RESOLVEDCALL_H

#include "State.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/Expr.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

namespace clang::tidy::torch {

/// The arguments of a call as the callee sees them: `obj(args)` on a lambda
/// or functor passes the object first; `std::make_shared<T>(args)` and a
/// TORCH_MODULE holder's constructor pass theirs on to T's constructor.
struct ResolvedCall {
  const Expr *Call = nullptr;
  /// The function that runs; null when not known.
  const FunctionDecl *Callee = nullptr;
  /// The argument for each parameter of Callee (null: a default argument).
  llvm::SmallVector<const Expr *, 4> Arguments;
  /// The object a member function or constructor runs on, in the caller;
  /// invalid when it is not a tracked location.
  Location Object;
  /// The object's expression, when there is one.
  const Expr *ObjectExpr = nullptr;
};

/// One function a call may run and the state after it.
struct Alternative {
  /// The class whose member function it is; null for a free function or a
  /// lambda (it may run on any object).
  const CXXRecordDecl *Class = nullptr;
  State After;
};
/// The state after a call that runs one of \p Results' functions, the same
/// one every time (Alternatives.cpp).
State joinAlternatives(llvm::ArrayRef<Alternative> Results);

/// The constructor that runs for \p Ctor: for one inherited with
/// `using Base::Base`, the base's, with the same arguments.
const CXXConstructorDecl *constructorThatRuns(const CXXConstructorDecl *Ctor);

/// The argument \p Call passes for \p P, its default argument's value
/// included (`torch::Device device = torch::kCPU`).
const Expr *argumentFor(const ResolvedCall &Call, const ParmVarDecl &P);

/// The function a direct call runs: its callee, or for a virtual call its
/// target when that is certain; null otherwise.
const FunctionDecl *certainCallee(const CallExpr &Call);

/// Whether \p Call returns a mean-reduced loss (Losses.h), as a fact.
Tri meanLoss(const CallExpr &Call);

/// The object a call of a type-erased callable goes through: the
/// std::function (or other library functor) of `f(args)`, or the function
/// pointer of a call without a direct callee; null for a direct call.
const Expr *callableHolder(const CallExpr &Call);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_RESOLVEDCALL_H
