//===--- OomRetry.h - torch-tidy --------------------------------*- C++ -*-===//
//
// The engine's view of an out-of-memory handler: a path that enters one
// records the storage written from then on (OomRecovery, in the State); a
// later call that repeats the try block's work, with none of that work's
// inputs written, runs it again at the same size. The work is recognised by
// its callee and its spelling; the inputs are the variables, members and
// fields it reads.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_OOMRETRY_H
#define TORCH_TIDY_MODEL_OOMRETRY_H

#include "State.h"
#include "clang/AST/DeclCXX.h"

namespace clang::tidy::torch {

/// The statements of a try block that are its work: calls run as a
/// statement, returned, or assigned, in source order.
llvm::SmallVector<const CallExpr *, 8> tryBlockWork(const CXXTryStmt &Try,
                                                    ASTContext &Ctx);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_OOMRETRY_H
