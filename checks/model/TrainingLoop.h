//===--- TrainingLoop.h - torch-tidy ----------------------------*- C++ -*-===//
//
// Does a loop train? Recognises the calls that make one: Tensor::backward(),
// torch::autograd::backward / grad, an optimizer's step(), and the
// project's own functions named in the options; through a call of a user
// function, its summary (ProgramModel) says whether its body does.
//
// Two flavours:
//  - findTrainingCall / loopCallsBackward / loopCallsBackwardOrStep:
//    *proven* calls, for checks that fire only inside training loops (a
//    call whose body is not known does not count);
//  - mayCallBackward: the conservative flavour, for checks that fire only
//    when no backward can run (a call that is opaque to the analysis and
//    receives a tensor counts as a possible backward).
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_UTILS_TRAININGLOOP_H
#define TORCH_TIDY_UTILS_TRAININGLOOP_H

#include "api/TorchApi.h"
#include "clang/AST/ASTContext.h"
#include "clang/AST/Expr.h"
#include "clang/AST/Stmt.h"

namespace clang::tidy::torch {

class ProgramModel;

/// `t.backward()`, `torch::autograd::backward(...)`,
/// `torch::autograd::grad(...)` or an extra backward function.
bool isBackwardCall(const CallExpr &Call, const TorchApiOptions &Opts);
/// `optimizer.step()` on a torch::optim::Optimizer (or a class derived from
/// it), or an extra step function.
bool isOptimizerStepCall(const CallExpr &Call, const TorchApiOptions &Opts);

enum class TrainingCall { Backward, Step, BackwardOrStep };

/// Whether \p Call itself runs \p What: it is such a call, or it calls a
/// user function whose summary proves one.
bool callTrains(const CallExpr &Call, ProgramModel &Program, TrainingCall What);

/// The first call that \p S runs (directly or in a lambda it contains) and
/// that trains (callTrains); null when none.
const CallExpr *findTrainingCall(const Stmt &S, ProgramModel &Program,
                                 TrainingCall What);

/// True when \p Loop (its body, condition and increment) provably calls
/// backward.
bool loopCallsBackward(const Stmt &Loop, ProgramModel &Program);
/// True when \p Loop provably calls backward or an optimizer step: a
/// training loop.
bool loopCallsBackwardOrStep(const Stmt &Loop, ProgramModel &Program);

/// Conservative: true when \p S may run a backward pass or an optimizer
/// step: it provably does, or it calls, with a tensor (or a container of
/// tensors) as an argument or object, a function whose body is not known
/// (no summary: not defined here, virtual, recursive, a function pointer or
/// std::function) outside LibTorch and the standard library.
bool mayCallBackward(const Stmt &S, ProgramModel &Program);

/// Whether \p S (not the lambdas it defines) may synchronise the device:
/// a synchronising call, or a user function whose summary says it may.
bool maySynchronize(const Stmt &S, ProgramModel &Program);

/// A tensor, a container or struct holding tensors, or a pointer/reference
/// to one: something through which a callee can reach an autograd graph.
bool carriesTensor(QualType T);

/// Where a storage location lives relative to one loop iteration.
enum class LoopStorage {
  /// A variable declared inside the loop: it dies with the iteration.
  PerIteration,
  /// A local variable or by-value parameter declared outside the loop (or a
  /// field or element of one).
  LocalOutsideLoop,
  /// A field of `*this`.
  Member,
  /// A global, static, reference, pointer target, or anything else.
  NonLocal,
};
struct StorageRoot {
  LoopStorage Kind = LoopStorage::NonLocal;
  /// The variable, or the field of `*this`; null when unknown.
  const ValueDecl *Decl = nullptr;
};
/// Classifies the object that the lvalue \p E denotes (through fields,
/// subscripts and `this->`) against \p Loop.
StorageRoot classifyStorage(const Expr *E, const Stmt &Loop,
                            const ASTContext &Ctx);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_UTILS_TRAININGLOOP_H
