//===--- UserCodeParents.h - torch-tidy -------------------------*- C++ -*-===//
//
// The parents of the nodes of a TU's user code: what ASTContext::getParents
// answers, but built only for declarations outside system headers.
//
// ASTContext's parent map covers the whole TU; with torch/torch.h that is
// every node of LibTorch and the standard library, which costs about as much
// memory as the AST itself. The checks only ever ask for the parents of user
// code, so this map skips declarations in system headers. It is built once
// per ASTContext, shared by every check, and freed with the ASTContext.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_SUPPORT_USERCODEPARENTS_H
#define TORCH_TIDY_SUPPORT_USERCODEPARENTS_H

#include "clang/AST/ASTContext.h"
#include "clang/AST/ASTTypeTraits.h"
#include "clang/ASTMatchers/ASTMatchers.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

namespace clang::tidy::torch {

class UserCodeParents {
public:
  /// The map of \p Ctx's TU, built on first use.
  static const UserCodeParents &of(ASTContext &Ctx);

  /// The parents of \p Node in traversal order (as RecursiveASTVisitor
  /// visits implicit code and template instantiations); empty for the TU,
  /// for nodes in system headers and for nodes that are not Decls or Stmts.
  llvm::ArrayRef<DynTypedNode> parents(const DynTypedNode &Node) const;
  template <typename T>
  llvm::ArrayRef<DynTypedNode> parents(const T &Node) const {
    return parents(DynTypedNode::create(Node));
  }

  explicit UserCodeParents(ASTContext &Ctx);

private:
  llvm::DenseMap<const void *, llvm::SmallVector<DynTypedNode, 1>> Parents;
};

/// Whether \p D is system code (LibTorch, the standard library): declared in
/// a system header, or expanded there from a macro. The user-code walks skip
/// it; the TranslationUnitDecl is never system code.
bool isSystemHeaderDecl(const Decl &D, const SourceManager &SM);

/// Shorthand for UserCodeParents::of(Ctx).parents(Node).
template <typename T>
llvm::ArrayRef<DynTypedNode> userCodeParents(const T &Node, ASTContext &Ctx) {
  return UserCodeParents::of(Ctx).parents(Node);
}

/// Whether \p Node is, or is inside, an instantiation of a class or function
/// template: isInstantiated() and isInTemplateInstantiation() on this map.
bool isInTemplateInstantiation(const DynTypedNode &Node, ASTContext &Ctx);

/// The body of the function that contains \p S, walking out of lambdas to
/// the function that defines them; null outside a function.
const Stmt *enclosingFunctionBody(const Stmt &S, ASTContext &Ctx);

/// Limits ASTContext's own parent map to the top-level declaration that
/// contains a given one, for as long as it lives. For clang analyses that
/// query that map themselves (ExprMutationAnalyzer); the destructor restores
/// the traversal scope, which drops the limited map again.
class LimitedParentMapScope {
public:
  LimitedParentMapScope(const Decl &Within, ASTContext &Ctx);
  LimitedParentMapScope(const Stmt &Within, ASTContext &Ctx);
  ~LimitedParentMapScope();
  LimitedParentMapScope(const LimitedParentMapScope &) = delete;
  LimitedParentMapScope &operator=(const LimitedParentMapScope &) = delete;

private:
  void limitTo(const Decl &Within);

  ASTContext &Ctx;
  std::vector<Decl *> SavedScope;
};

/// Drop-in replacements for the stock isInTemplateInstantiation() and
/// isInstantiated() matchers, which build ASTContext's parent map of the
/// whole TU (LibTorch included) on their first use.
AST_MATCHER(Stmt, isInUserTemplateInstantiation) {
  return isInTemplateInstantiation(DynTypedNode::create(Node),
                                   Finder->getASTContext());
}
AST_MATCHER(Decl, isUserTemplateInstantiation) {
  return isInTemplateInstantiation(DynTypedNode::create(Node),
                                   Finder->getASTContext());
}

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_SUPPORT_USERCODEPARENTS_H
