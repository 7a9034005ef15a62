//===--- FixIts.h - torch-tidy ----------------------------------*- C++ -*-===//
//
// Fix-its shared by the checks.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_SUPPORT_FIXITS_H
#define TORCH_TIDY_SUPPORT_FIXITS_H

#include "clang/AST/ASTContext.h"
#include "clang/AST/Expr.h"
#include "clang/Basic/Diagnostic.h"
#include "llvm/ADT/SmallVector.h"

namespace clang::tidy::torch {

/// The insertions that call \p Call on the value of \p E: `E.detach()`, or
/// `(a + b).detach()` where the call would bind to a part of E. None when
/// E is spelled in a macro.
llvm::SmallVector<FixItHint, 2> callOnValue(const Expr &E, llvm::StringRef Call,
                                            const ASTContext &Ctx);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_SUPPORT_FIXITS_H
