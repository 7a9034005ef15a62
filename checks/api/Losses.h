//===--- Losses.h - torch-tidy ----------------------------------*- C++ -*-===//
//
// How LibTorch reduces a loss over the batch: `.mean()`, the loss functions
// (torch::mse_loss, torch::nn::functional::cross_entropy, ...) and the loss
// modules (torch::nn::CrossEntropyLoss, ...), whose default reduction is the
// mean; and the in-place calls that rescale gradients.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_API_LOSSES_H
#define TORCH_TIDY_API_LOSSES_H

#include "clang/AST/Expr.h"
#include "clang/AST/ExprCXX.h"
#include <optional>

namespace clang::tidy::torch {

/// Whether \p Call returns a loss reduced to its mean over every element:
/// `.mean()` / `torch::mean(x)` with no dimension, or a loss function whose
/// reduction is the default or kMean. False for another reduction; nullopt
/// when it is not a loss or its options are not visible.
std::optional<bool> reducesToMean(const CallExpr &Call);

/// Whether a loss module of type \p T, built by \p E (null: default
/// options; `torch::nn::MSELoss()`,
/// `CrossEntropyLoss(CrossEntropyLossOptions().reduction(torch::kSum))`)
/// returns mean-reduced losses; nullopt for other modules and for options
/// that are not visible.
std::optional<bool> lossModuleReducesToMean(QualType T,
                                            const CXXConstructExpr *E);

/// A call that rescales gradients in place: `p.grad().div_(n)`,
/// `p.mutable_grad() *= s`, `p.grad().mul_(s)`.
bool isGradientRescale(const CallExpr &Call);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_API_LOSSES_H
