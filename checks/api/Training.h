//===--- Training.h - torch-tidy --------------------------------*- C++ -*-===//
//
// The LibTorch calls that train: a backward pass, an optimizer step, a
// gradient reset; and the RAII guards and calls that switch autograd off.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_API_TRAINING_H
#define TORCH_TIDY_API_TRAINING_H

#include "TorchApi.h"
#include "clang/AST/ASTContext.h"
#include "clang/AST/Decl.h"
#include "clang/AST/Expr.h"

namespace clang::tidy::torch {

/// `t.backward()`, `torch::autograd::backward(...)`, or one of
/// \p Opts.ExtraBackwardFunctions. Not `torch::autograd::grad(...)`, which
/// computes gradients without accumulating them into parameters.
bool isBackwardCall(const CallExpr &Call, const TorchApiOptions &Opts);
/// `torch::autograd::grad(...)`: it runs backward through the graph (a
/// gradient penalty, Grad-CAM) but takes no training step.
bool isGradientCall(const CallExpr &Call);
/// `optimizer.step()` on a torch::optim::Optimizer (or a class derived from
/// it), or one of \p Opts.ExtraStepFunctions.
bool isOptimizerStepCall(const CallExpr &Call, const TorchApiOptions &Opts);
/// The tensor a backward() receiver is computed from through reductions
/// and arithmetic with a non-tensor (`loss.mean()`, `loss / k`): its graph is
/// the one backward() runs through. \p E itself otherwise.
const Expr *backwardSource(const Expr *E);
/// `optimizer.zero_grad()`, `module->zero_grad()`.
bool isZeroGradCall(const CallExpr &Call);
/// Any gradient reset: isZeroGradCall, `p.grad().zero_()`,
/// `p.mutable_grad().reset()`, or one of \p Opts.ZeroGradFunctions.
bool isGradientReset(const CallExpr &Call, const TorchApiOptions &Opts);
/// A torch::optim::Optimizer or a class derived from it.
bool isOptimizerClass(const CXXRecordDecl *RD);

/// What declaring a variable does to autograd for the rest of its scope.
enum class GradGuardEffect { None, Disables, Enables, Unknown };
/// NoGradGuard and InferenceMode() disable, AutoGradMode(false) disables,
/// AutoGradMode(true) enables, a run-time argument is Unknown; a variable of
/// a type in \p Opts.GuardTypes disables; an object of a class that holds
/// such a guard as a member does what that member does.
GradGuardEffect gradGuardEffect(const VarDecl &VD, const ASTContext &Ctx,
                                const TorchApiOptions &Opts);
/// `c10::GradMode::set_enabled(x)`: its argument, or null.
const Expr *setGradEnabledArgument(const CallExpr &Call);

/// `N` of the `i % N` in the condition of the `if` around \p Step (a
/// step of gradient accumulation), when it is a literal or a variable;
/// empty otherwise.
std::string accumulationCount(const Stmt &Step, ASTContext &Ctx);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_API_TRAINING_H
