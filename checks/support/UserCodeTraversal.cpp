//===--- UserCodeTraversal.cpp - torch-tidy -------------------------------===//

#include "UserCodeTraversal.h"
#include "UserCodeParents.h"
#include "clang/AST/ASTContext.h"
#include "clang/ASTMatchers/ASTMatchers.h"

namespace clang::tidy::torch {

using namespace ast_matchers;

UserCodeTraversal::UserCodeTraversal(ClangTidyContext *Context)
    : WholeTU(Context->getOptions().SystemHeaders.value_or(false)) {}

void UserCodeTraversal::registerMatchers(MatchFinder *Finder) {
  if (!WholeTU)
    Finder->addMatcher(translationUnitDecl().bind("translationUnit"), this);
}

std::vector<Decl *> UserCodeTraversal::userDeclarations(ASTContext &Ctx) {
  const SourceManager &SM = Ctx.getSourceManager();
  std::vector<Decl *> Scope;
  for (Decl *D : Ctx.getTranslationUnitDecl()->decls())
    if (!isSystemHeaderDecl(*D, SM))
      Scope.push_back(D);
  return Scope;
}

void UserCodeTraversal::run(const MatchFinder::MatchResult &Result) {
  ASTContext &Ctx = *Result.Context;
  // Every torch check registers this; the first one narrows the scope.
  std::vector<Decl *> Current = Ctx.getTraversalScope();
  if (Current.size() != 1 || !isa<TranslationUnitDecl>(Current.front()))
    return;
  Ctx.setTraversalScope(userDeclarations(Ctx));
}

} // namespace clang::tidy::torch
