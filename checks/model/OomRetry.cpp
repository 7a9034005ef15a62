//===--- OomRetry.cpp - torch-tidy ----------------------------------------===//

#include "OomRetry.h"
#include "api/TorchMatchers.h"
#include "support/UserCodeParents.h"
#include "clang/AST/ExprCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Analysis/Analyses/ExprMutationAnalyzer.h"
#include "clang/Lex/Lexer.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

namespace {

using DeclSet = llvm::SmallPtrSet<const Decl *, 8>;

/// True when \p Call is the whole work of its statement: run as a statement,
/// returned, used to initialise a variable or assigned to one. Calls buried
/// in larger expressions (`t.size(0)`, `std::cout << ...`) are not work.
bool isStatementLevelCall(const CallExpr &Call, ASTContext &Ctx) {
  if (const auto *Operator = dyn_cast<CXXOperatorCallExpr>(&Call);
      Operator && Operator->getOperator() != OO_Call)
    return false;
  const Stmt *Current = &Call;
  for (unsigned Depth = 0; Depth < 64; ++Depth) {
    llvm::ArrayRef<DynTypedNode> Parents = userCodeParents(*Current, Ctx);
    if (Parents.size() != 1)
      return false;
    if (Parents[0].get<VarDecl>())
      return true;
    const auto *Parent = Parents[0].get<Stmt>();
    if (!Parent)
      return false;
    if (isa<ReturnStmt>(Parent))
      return true;
    const auto *Construct = dyn_cast<CXXConstructExpr>(Parent);
    const auto *Assign = dyn_cast<BinaryOperator>(Parent);
    const auto *AssignOperator = dyn_cast<CXXOperatorCallExpr>(Parent);
    bool Wrapper =
        isa<ExprWithCleanups, CXXBindTemporaryExpr, MaterializeTemporaryExpr,
            ImplicitCastExpr, ParenExpr>(Parent) ||
        (Construct && Construct->getNumArgs() == 1) ||
        (Assign && Assign->isAssignmentOp() && Assign->getRHS() == Current) ||
        (AssignOperator && AssignOperator->getOperator() == OO_Equal &&
         AssignOperator->getNumArgs() == 2 &&
         AssignOperator->getArg(1) == Current);
    if (!Wrapper)
      return isRunAsStatement(*Parent, *Current, Ctx);
    Current = Parent;
  }
  return false;
}

const FunctionDecl *calleeKey(const CallExpr &Call) {
  const FunctionDecl *Callee = Call.getDirectCallee();
  return Callee ? Callee->getCanonicalDecl() : nullptr;
}

/// The call as written, without whitespace: two calls that read the same
/// compute the same size.
std::string spelling(const Expr &E, ASTContext &Ctx) {
  StringRef Text =
      Lexer::getSourceText(CharSourceRange::getTokenRange(E.getSourceRange()),
                           Ctx.getSourceManager(), Ctx.getLangOpts());
  std::string Compact;
  for (char C : Text)
    if (!isspace(static_cast<unsigned char>(C)))
      Compact.push_back(C);
  return Compact;
}

bool hasSpelledArgument(const CallExpr &Call) {
  return llvm::any_of(Call.arguments(), [](const Expr *Arg) {
    return !isa<CXXDefaultArgExpr>(Arg);
  });
}

/// Variables and fields that \p S reads or writes.
void collectReferencedDecls(const Stmt *S, DeclSet &Decls) {
  if (!S)
    return;
  if (const auto *Ref = dyn_cast<DeclRefExpr>(S)) {
    if (isa<VarDecl>(Ref->getDecl()))
      Decls.insert(Ref->getDecl()->getCanonicalDecl());
  } else if (const auto *Member = dyn_cast<MemberExpr>(S)) {
    if (isa<FieldDecl>(Member->getMemberDecl()))
      Decls.insert(Member->getMemberDecl()->getCanonicalDecl());
  }
  for (const Stmt *Child : S->children())
    collectReferencedDecls(Child, Decls);
}

/// The places in \p Region that change \p D: assignments, increments,
/// in-place tensor methods (`x.resize_()`, which LibTorch declares const).
llvm::SmallVector<const Stmt *, 4>
directChanges(const Decl *D, const Stmt &Region, ASTContext &Ctx) {
  auto Ref = ignoringParenImpCasts(
      expr(anyOf(declRefExpr(to(decl(equalsNode(D)))),
                 memberExpr(member(valueDecl(equalsNode(D)))))));
  auto Change = expr(anyOf(
      binaryOperator(isAssignmentOperator(), hasLHS(Ref)),
      unaryOperator(hasAnyOperatorName("++", "--"), hasUnaryOperand(Ref)),
      cxxOperatorCallExpr(isAssignmentOperator(), hasArgument(0, Ref)),
      cxxMemberCallExpr(on(Ref), callee(cxxMethodDecl(matchesName("_$"))))));
  llvm::SmallVector<const Stmt *, 4> Sites;
  for (const auto &Match : match(findAll(Change.bind("change")), Region, Ctx))
    Sites.push_back(Match.getNodeAs<Stmt>("change"));
  return Sites;
}

/// True when \p Region may change \p D.
bool isChangedIn(const Decl *D, const Stmt &Region, ASTContext &Ctx) {
  if (!directChanges(D, Region, Ctx).empty())
    return true;
  // Passing by non-const reference, calling a non-const method, ...
  if (!isa<VarDecl>(D))
    return false;
  LimitedParentMapScope LocalParents(Region, Ctx);
  return ExprMutationAnalyzer(Region, Ctx).isMutated(D);
}

/// True when \p D may change in \p Handler before \p Before.
bool isChangedBefore(const Decl *D, const CompoundStmt &Handler,
                     SourceLocation Before, ASTContext &Ctx) {
  const SourceManager &SM = Ctx.getSourceManager();
  for (const Stmt *Site : directChanges(D, Handler, Ctx))
    if (SM.isBeforeInTranslationUnit(Site->getBeginLoc(), Before))
      return true;
  for (const Stmt *Statement : Handler.body())
    if (SM.isBeforeInTranslationUnit(Statement->getEndLoc(), Before) &&
        isChangedIn(D, *Statement, Ctx))
      return true;
  return false;
}

/// True when the handler always leaves the loop: a `return`, `break`,
/// `goto`, `throw` or noreturn call at its top level.
bool exitsUnconditionally(const CompoundStmt &Handler) {
  for (const Stmt *Statement : Handler.body()) {
    if (isa<ReturnStmt, BreakStmt, GotoStmt, CoreturnStmt>(Statement))
      return true;
    const auto *E = dyn_cast<Expr>(Statement);
    if (!E)
      continue;
    E = E->IgnoreImplicit();
    if (isa<CXXThrowExpr>(E))
      return true;
    if (const auto *Call = dyn_cast<CallExpr>(E))
      if (const FunctionDecl *Callee = Call->getDirectCallee();
          Callee && Callee->isNoReturn())
        return true;
  }
  return false;
}

/// Statement-level calls of \p Block, in source order.
llvm::SmallVector<const CallExpr *, 8> workCalls(const Stmt &Block,
                                                 ASTContext &Ctx) {
  llvm::SmallVector<const CallExpr *, 8> Calls;
  for (const auto &Match : match(findAll(callExpr().bind("c")), Block, Ctx)) {
    const auto *Call = Match.getNodeAs<CallExpr>("c");
    if (calleeKey(*Call) && isStatementLevelCall(*Call, Ctx))
      Calls.push_back(Call);
  }
  return Calls;
}

/// A call in the handler, after \p EmptyCache, that repeats a call of the
/// try block with the same spelling and unchanged inputs.
const CallExpr *findRetryCall(const CXXTryStmt &Try, const CXXCatchStmt &Catch,
                              const CallExpr &EmptyCache, ASTContext &Ctx) {
  const SourceManager &SM = Ctx.getSourceManager();
  const auto *Handler = dyn_cast<CompoundStmt>(Catch.getHandlerBlock());
  if (!Handler)
    return nullptr;
  llvm::SmallVector<const CallExpr *, 8> Tried =
      workCalls(*Try.getTryBlock(), Ctx);
  for (const CallExpr *Retry : workCalls(*Handler, Ctx)) {
    if (!SM.isBeforeInTranslationUnit(EmptyCache.getEndLoc(),
                                      Retry->getBeginLoc()))
      continue;
    std::string Spelled = spelling(*Retry, Ctx);
    bool Repeats =
        !Spelled.empty() && llvm::any_of(Tried, [&](const CallExpr *C) {
          return calleeKey(*C) == calleeKey(*Retry) &&
                 spelling(*C, Ctx) == Spelled;
        });
    // A bare `reset()` or `zero_grad()` is clean-up, not the work, unless it
    // is all the try block did.
    if (!Repeats || (!hasSpelledArgument(*Retry) && Tried.size() != 1))
      continue;
    DeclSet Inputs;
    collectReferencedDecls(Retry, Inputs);
    if (llvm::none_of(Inputs, [&](const Decl *D) {
          return isChangedBefore(D, *Handler, Retry->getBeginLoc(), Ctx);
        }))
      return Retry;
  }
  return nullptr;
}

/// The loop that runs \p Try again after the handler, with the same inputs;
/// null when the handler leaves the loop or something changes the inputs.
const Stmt *findRetryLoop(const CXXTryStmt &Try, const CXXCatchStmt &Catch,
                          ASTContext &Ctx) {
  EnclosingLoop Where = findEnclosingLoop(Try, Ctx);
  const auto *Handler = dyn_cast<CompoundStmt>(Catch.getHandlerBlock());
  if (!Where.Loop || Where.ViaLambda || !Handler ||
      exitsUnconditionally(*Handler))
    return nullptr;
  const Stmt *Body = nullptr, *Cond = nullptr, *Inc = nullptr;
  if (const auto *For = dyn_cast<ForStmt>(Where.Loop)) {
    Body = For->getBody(), Cond = For->getCond(), Inc = For->getInc();
  } else if (const auto *While = dyn_cast<WhileStmt>(Where.Loop)) {
    Body = While->getBody(), Cond = While->getCond();
  } else if (const auto *Do = dyn_cast<DoStmt>(Where.Loop)) {
    Body = Do->getBody(), Cond = Do->getCond();
  } else {
    // A range-for hands the try block a new element each time.
    return nullptr;
  }
  // The loop's other statements, which run between two attempts.
  llvm::SmallVector<const Stmt *, 8> Between = {Handler};
  if (Cond)
    Between.push_back(Cond);
  if (Inc)
    Between.push_back(Inc);
  if (const auto *Block = dyn_cast<CompoundStmt>(Body)) {
    if (!llvm::is_contained(Block->body(), &Try))
      return nullptr; // Nested under a condition: too little is known.
    for (const Stmt *Statement : Block->body())
      if (Statement != &Try)
        Between.push_back(Statement);
  } else if (Body != &Try) {
    return nullptr;
  }

  const SourceManager &SM = Ctx.getSourceManager();
  SourceRange LoopRange = Where.Loop->getSourceRange();
  SourceRange TryBlockRange = Try.getTryBlock()->getSourceRange();
  DeclSet Inputs;
  collectReferencedDecls(Try.getTryBlock(), Inputs);
  for (const Decl *D : Inputs) {
    SourceLocation Loc = D->getLocation();
    // Declared in the loop but outside the try block: new each iteration.
    if (SM.isPointWithin(Loc, LoopRange.getBegin(), LoopRange.getEnd()) &&
        !SM.isPointWithin(Loc, TryBlockRange.getBegin(),
                          TryBlockRange.getEnd()))
      return nullptr;
    for (const Stmt *Region : Between)
      if (isChangedIn(D, *Region, Ctx))
        return nullptr;
  }
  return Where.Loop;
}

} // namespace

const CXXCatchStmt *enclosingHandler(const Stmt &S, ASTContext &Ctx) {
  DynTypedNode Node = DynTypedNode::create(S);
  for (unsigned Depth = 0; Depth < 512; ++Depth) {
    llvm::ArrayRef<DynTypedNode> Parents = userCodeParents(Node, Ctx);
    if (Parents.empty())
      return nullptr;
    const auto *Parent = Parents[0].get<Stmt>();
    if (!Parent || isa<LambdaExpr>(Parent))
      return nullptr;
    if (const auto *Catch = dyn_cast<CXXCatchStmt>(Parent))
      return Catch;
    Node = Parents[0];
  }
  return nullptr;
}

bool isOrDerivesFrom(const CXXRecordDecl *Record, StringRef QualifiedName) {
  if (!Record)
    return false;
  if (Record->getQualifiedNameAsString() == QualifiedName)
    return true;
  Record = Record->getDefinition();
  if (!Record)
    return false;
  return llvm::any_of(Record->bases(), [&](const CXXBaseSpecifier &Base) {
    return isOrDerivesFrom(Base.getType()->getAsCXXRecordDecl(), QualifiedName);
  });
}

std::optional<OomRetry> findSameSizeRetry(const CXXCatchStmt &Catch,
                                          const CallExpr &After,
                                          ASTContext &Ctx) {
  llvm::ArrayRef<DynTypedNode> Parents = userCodeParents(Catch, Ctx);
  const auto *Try = Parents.empty() ? nullptr : Parents[0].get<CXXTryStmt>();
  if (!Try)
    return std::nullopt;
  if (const CallExpr *Call = findRetryCall(*Try, Catch, After, Ctx))
    return OomRetry{Call, nullptr};
  if (const Stmt *Loop = findRetryLoop(*Try, Catch, Ctx))
    return OomRetry{nullptr, Loop};
  return std::nullopt;
}

} // namespace clang::tidy::torch
