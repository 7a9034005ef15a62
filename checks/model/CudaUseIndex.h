//===--- CudaUseIndex.h - torch-tidy ----------------------------*- C++ -*-===//
//
// One walk over the user code of a translation unit that records, for the
// CUDA availability model, every reference to a function, variable or class
// and every candidate CUDA selection, each with the code that contains it.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_ANALYSIS_CUDAUSEINDEX_H
#define TORCH_TIDY_ANALYSIS_CUDAUSEINDEX_H

#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include <functional>
#include <memory>
#include <vector>

namespace clang::tidy::torch::cuda_guard {

enum class RootKind { Function, Lambda, FieldInit, GlobalInit };

/// A piece of code that runs from its own entry: a function body, a lambda
/// body, a member's default initialiser or a global's initialiser.
struct RootKey {
  RootKind Kind;
  const Decl *Owner = nullptr; // FunctionDecl, FieldDecl or VarDecl
  const LambdaExpr *Lambda = nullptr;
  Stmt *Body = nullptr;
};

/// Calls \p Fn on every statement of \p S, not entering lambda bodies (they
/// are roots of their own).
void forEachStmt(const Stmt *S, const std::function<void(const Stmt &)> &Fn);

/// A reference (or construction) and the code that contains it.
struct Site {
  const Expr *E;
  RootKey Root;
};

/// What one walk over the user code of the TU finds.
struct TUIndex {
  /// References to functions, variables and fields; constructions through a
  /// constructor.
  llvm::DenseMap<const Decl *, llvm::SmallVector<Site, 4>> Refs;
  /// Where each class is constructed (directly, through make_shared /
  /// make_unique, or through a TORCH_MODULE holder).
  llvm::DenseMap<const CXXRecordDecl *, llvm::SmallVector<Site, 4>>
      Constructions;
  /// Written constructor initialisers of each member.
  llvm::DenseMap<const FieldDecl *, llvm::SmallVector<const Expr *, 2>>
      FieldInits;
  /// The code in which each lambda expression appears.
  llvm::DenseMap<const LambdaExpr *, llvm::SmallVector<RootKey, 1>>
      LambdaPositions;
  /// Candidate CUDA selections: CUDA literals and `.cuda()` calls.
  std::vector<Site> Candidates;
};

/// Walks the user code of the TU behind \p Ctx (template instantiations
/// included, system headers skipped).
std::unique_ptr<TUIndex> indexUserCode(ASTContext &Ctx);

} // namespace clang::tidy::torch::cuda_guard

#endif // TORCH_TIDY_ANALYSIS_CUDAUSEINDEX_H
