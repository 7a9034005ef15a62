//===--- FixIts.cpp - torch-tidy ------------------------------------------===//

#include "FixIts.h"
#include "clang/AST/ExprCXX.h"
#include "clang/Lex/Lexer.h"

namespace clang::tidy::torch {

/// Whether `E.f()` parses as a call on all of E without parentheses.
static bool isPostfixOperand(const Expr *E) {
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E))
    return Op->getOperator() == OO_Subscript || Op->getOperator() == OO_Call ||
           Op->getOperator() == OO_Arrow;
  return isa<DeclRefExpr, MemberExpr, CallExpr, ParenExpr, ArraySubscriptExpr>(
      E);
}

llvm::SmallVector<FixItHint, 2> callOnValue(const Expr &Value,
                                            llvm::StringRef Call,
                                            const ASTContext &Ctx) {
  const Expr *E = Value.IgnoreImplicit();
  SourceRange R = E->getSourceRange();
  if (R.isInvalid() || R.getBegin().isMacroID() || R.getEnd().isMacroID())
    return {};
  SourceLocation End = Lexer::getLocForEndOfToken(
      R.getEnd(), 0, Ctx.getSourceManager(), Ctx.getLangOpts());
  if (isPostfixOperand(E))
    return {FixItHint::CreateInsertion(End, Call)};
  return {FixItHint::CreateInsertion(R.getBegin(), "("),
          FixItHint::CreateInsertion(End, (")" + Call).str())};
}

} // namespace clang::tidy::torch
