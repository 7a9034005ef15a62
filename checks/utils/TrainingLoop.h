//===--- TrainingLoop.h - torch-tidy ----------------------------*- C++ -*-===//
//
// Does a loop train? Recognises the calls that make one: Tensor::backward(),
// torch::autograd::backward / grad, and an optimizer's step(); follows calls
// into functions and lambdas defined in the translation unit.
//
// Two flavours:
//  - loopCallsBackward / loopCallsBackwardOrStep: *proven* calls, for checks
//    that fire only inside training loops (a call whose body is not visible
//    does not count);
//  - mayCallBackward: the conservative flavour, for checks that fire only
//    when no backward can run (a call that is opaque to the analysis and
//    receives a tensor counts as a possible backward).
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_UTILS_TRAININGLOOP_H
#define TORCH_TIDY_UTILS_TRAININGLOOP_H

#include "clang/AST/ASTContext.h"
#include "clang/AST/Expr.h"
#include "clang/AST/Stmt.h"
#include <string>
#include <vector>

namespace clang::tidy::torch {

struct TrainingLoopOptions {
  /// Extra functions that count as a backward pass. An entry with `::` is
  /// compared with the qualified name (a leading `::` is ignored), one
  /// without with the plain name: `my::Trainer::backward_step`, `train_step`.
  std::vector<std::string> ExtraBackwardFunctions;
  /// Extra functions that count as an optimizer step, same spelling.
  std::vector<std::string> ExtraStepFunctions;
  /// How many levels of calls into functions defined in the translation unit
  /// are followed (0: the statement itself only).
  unsigned CalleeDepth = 3;
};

/// `t.backward()`, `torch::autograd::backward(...)`,
/// `torch::autograd::grad(...)` or an extra backward function.
bool isBackwardCall(const CallExpr &Call, const TrainingLoopOptions &Opts);
/// `optimizer.step()` on a torch::optim::Optimizer (or a class derived from
/// it), or an extra step function.
bool isOptimizerStepCall(const CallExpr &Call, const TrainingLoopOptions &Opts);

/// The first backward call (or, with \p IncludeStep, optimizer step) that
/// \p S runs, directly, in a lambda it contains, or in a function defined in
/// the TU that it calls (up to Opts.CalleeDepth levels); null when none.
const CallExpr *findBackwardCall(const Stmt &S, ASTContext &Ctx,
                                 const TrainingLoopOptions &Opts,
                                 bool IncludeStep);

/// True when \p Loop (its body, condition and increment) provably calls
/// backward.
bool loopCallsBackward(const Stmt &Loop, ASTContext &Ctx,
                       const TrainingLoopOptions &Opts = {});
/// True when \p Loop provably calls backward or an optimizer step: a
/// training loop.
bool loopCallsBackwardOrStep(const Stmt &Loop, ASTContext &Ctx,
                             const TrainingLoopOptions &Opts = {});

/// Conservative: true when \p S may run a backward pass or an optimizer
/// step: it provably does, or it calls, with a tensor (or a container of
/// tensors) as an argument or object, a function the analysis cannot see
/// into (declared but not defined in the TU, virtual, a function pointer or
/// std::function) outside LibTorch and the standard library.
bool mayCallBackward(const Stmt &S, ASTContext &Ctx,
                     const TrainingLoopOptions &Opts = {});

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
