//===--- OomRetry.h - torch-tidy --------------------------------*- C++ -*-===//
//
// Whether an out-of-memory handler runs the failed work again at the same
// size: the same call repeated in the handler with unchanged inputs, or a
// loop around the `try` that runs it again with unchanged inputs.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_OOMRETRY_H
#define TORCH_TIDY_MODEL_OOMRETRY_H

#include "clang/AST/ASTContext.h"
#include "clang/AST/StmtCXX.h"
#include <optional>

namespace clang::tidy::torch {

/// How a handler retries: exactly one of the two is set.
struct OomRetry {
  /// A call of the try block, repeated in the handler.
  const CallExpr *Call = nullptr;
  /// The loop that runs the try block again after the handler.
  const Stmt *Loop = nullptr;
};

/// The `catch` whose handler runs \p S, without leaving the function or
/// lambda that \p S is written in.
const CXXCatchStmt *enclosingHandler(const Stmt &S, ASTContext &Ctx);

/// Whether \p Record is the class \p QualifiedName or derives from it.
bool isOrDerivesFrom(const CXXRecordDecl *Record, StringRef QualifiedName);

/// The same-size retry of \p Catch's try block, with a repeated call only
/// after \p After (the `emptyCache()` in the handler).
std::optional<OomRetry> findSameSizeRetry(const CXXCatchStmt &Catch,
                                          const CallExpr &After,
                                          ASTContext &Ctx);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_OOMRETRY_H
