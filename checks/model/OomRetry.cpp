//===--- OomRetry.cpp - torch-tidy ----------------------------------------===//

#include "OomRetry.h"
#include "FlowModel.h"
#include "Summary.h"
#include "api/TorchApi.h"
#include "api/TorchMatchers.h"
#include "api/Training.h"
#include "support/UserCodeParents.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/Analysis/Analyses/ExprMutationAnalyzer.h"
#include "clang/Lex/Lexer.h"

namespace clang::tidy::torch {

namespace {

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
    // `std::exp(run(...))`: a library function of the work's result.
    const auto *Outer = dyn_cast<CallExpr>(Parent);
    const FunctionDecl *OuterCallee =
        Outer && !isa<CXXOperatorCallExpr, CXXMemberCallExpr>(Outer)
            ? Outer->getDirectCallee()
            : nullptr;
    bool OfResult = OuterCallee && isLibraryFunction(*OuterCallee) &&
                    llvm::is_contained(Outer->arguments(), Current);
    const auto *AssignOperator = dyn_cast<CXXOperatorCallExpr>(Parent);
    bool Wrapper =
        isa<ExprWithCleanups, CXXBindTemporaryExpr, MaterializeTemporaryExpr,
            ImplicitCastExpr, ParenExpr>(Parent) ||
        (Construct && Construct->getNumArgs() == 1) || OfResult ||
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

/// The function a call runs, as written: a template's calls compare by the
/// pattern they were instantiated from.
const FunctionDecl *calleeKey(const CallExpr &Call) {
  const FunctionDecl *Callee = Call.getDirectCallee();
  if (!Callee)
    return nullptr;
  if (const FunctionDecl *Pattern = Callee->getTemplateInstantiationPattern())
    Callee = Pattern;
  return Callee->getCanonicalDecl();
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

/// Whether the caller uses \p Call's result (tests it, stores it) rather
/// than running it as a statement.
bool resultIsUsed(const CallExpr &Call, ASTContext &Ctx) {
  if (Call.getType()->isVoidType())
    return false;
  const Stmt *Current = &Call;
  for (unsigned Depth = 0; Depth < 16; ++Depth) {
    llvm::ArrayRef<DynTypedNode> Parents = userCodeParents(*Current, Ctx);
    if (Parents.size() != 1)
      return false;
    const auto *Parent = Parents[0].get<Stmt>();
    if (!Parent)
      return Parents[0].get<VarDecl>() != nullptr;
    if (!isa<ExprWithCleanups, CXXBindTemporaryExpr, MaterializeTemporaryExpr,
             ImplicitCastExpr, ParenExpr>(Parent))
      return !isRunAsStatement(*Parent, *Current, Ctx);
    Current = Parent;
  }
  return false;
}

bool isWithin(const Stmt &Inner, SourceRange Outer, const SourceManager &SM) {
  return SM.isPointWithin(Inner.getBeginLoc(), Outer.getBegin(),
                          Outer.getEnd());
}

/// The storage \p E names, from its written form: a variable, `*this`, or a
/// field of either; invalid when it is none of these (a temporary, `*p`).
Location writtenStorage(const Expr *E) {
  llvm::SmallVector<const FieldDecl *, 2> Fields;
  for (unsigned Depth = 0; E && Depth < 16; ++Depth) {
    E = E->IgnoreParenImpCasts();
    if (const auto *Member = dyn_cast<MemberExpr>(E)) {
      if (const auto *Field = dyn_cast<FieldDecl>(Member->getMemberDecl()))
        Fields.push_back(Field);
      else
        Fields.clear(); // A method names its object.
      E = Member->getBase();
      continue;
    }
    if (const auto *Subscript = dyn_cast<ArraySubscriptExpr>(E)) {
      Fields.clear();
      E = Subscript->getBase();
      continue;
    }
    if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E);
        Op && Op->getNumArgs() >= 1 &&
        (Op->getOperator() == OO_Subscript || Op->getOperator() == OO_Arrow ||
         Op->getOperator() == OO_Star)) {
      Fields.clear();
      E = Op->getArg(0);
      continue;
    }
    if (const auto *Unary = dyn_cast<UnaryOperator>(E);
        Unary && Unary->getOpcode() == UO_AddrOf) {
      E = Unary->getSubExpr();
      continue;
    }
    if (const auto *Call = dyn_cast<CXXMemberCallExpr>(E)) {
      Fields.clear(); // `v.at(i)`, `opts.get()`: part of the object.
      E = Call->getImplicitObjectArgument();
      continue;
    }
    break;
  }
  Location Root;
  if (isa_and_nonnull<CXXThisExpr>(E)) {
    Root = Location::thisObject();
  } else if (const auto *Ref = dyn_cast_or_null<DeclRefExpr>(E)) {
    const auto *Var = dyn_cast<VarDecl>(Ref->getDecl());
    if (!Var)
      return {};
    Root = Var->hasLocalStorage() ? Location::local(Var)
                                  : Location::global(Var);
  } else {
    return {};
  }
  for (const FieldDecl *Field : llvm::reverse(Fields))
    if (Location Child = Root.child(Selector::field(Field)))
      Root = Child;
    else
      break;
  return Root;
}

bool isNonConstReference(QualType T) {
  if (T->isLValueReferenceType() || T->isRValueReferenceType())
    return !T.getNonReferenceType().isConstQualified();
  if (T->isPointerType())
    return !T->getPointeeType().isConstQualified();
  return false;
}

/// What writing to \p L cannot change: the size of the work. The weights and
/// optimizer state a step trains (modules, optimizers) and the tensors it
/// computes are rewritten by every attempt.
bool isSizeNeutral(const Location &L) {
  QualType T;
  if (const FieldDecl *Field = L.last().asField())
    T = Field->getType();
  else if (L.Depth == 0 && L.Root)
    T = L.Root->getType();
  else
    return false;
  T = T.getNonReferenceType();
  const CXXRecordDecl *Record = T->getAsCXXRecordDecl();
  return isTensorType(T) || isModuleHandleType(T) || isOptimizerClass(Record) ||
         isOrDerivesFrom(Record, "torch::nn::Module");
}

/// Where a statement's writes land, as one function's code names them.
using StorageOf = llvm::function_ref<Location(const Expr *)>;

/// How far writes are followed into callees, and whether a user function
/// without a body counts as writing what it may (OpaqueWrites).
struct WriteScope {
  unsigned Depth = 2;
  bool OpaqueWrites = true;
};

void collectWrites(const Stmt &S, StorageOf Storage,
                   llvm::SmallVectorImpl<Location> &Out, bool &Unknown,
                   WriteScope Scope);

/// Whether a call of \p Method may change its object: a non-const method
/// whose body, or a method it calls on the same object, writes a member.
bool methodMayChangeObject(const CXXMethodDecl &Method, WriteScope Scope) {
  if (Method.isConst() || Method.getParent()->isLambda())
    return false;
  const Stmt *Body = Method.getBody();
  if (!Body)
    return Scope.OpaqueWrites || isLibraryFunction(Method);
  if (Scope.Depth == 0)
    return true;
  struct Visitor : RecursiveASTVisitor<Visitor> {
    WriteScope Scope;
    bool Changes = false;
    bool VisitStmt(Stmt *S) {
      llvm::SmallVector<Location, 2> Writes;
      bool Unknown = false;
      collectWrites(*S, writtenStorage, Writes, Unknown, Scope);
      Changes |= llvm::any_of(Writes, [](const Location &L) {
        return L.Kind == Location::This && !isSizeNeutral(L);
      });
      return !Changes;
    }
  } V;
  V.Scope = {Scope.Depth - 1, Scope.OpaqueWrites};
  V.TraverseStmt(const_cast<Stmt *>(Body));
  return V.Changes;
}

/// Whether \p Callee may change the argument it receives for \p Param.
bool mayChangeArgument(const FunctionDecl *Callee, unsigned Param,
                       WriteScope Scope) {
  if (!Callee || Param >= Callee->getNumParams())
    return Scope.OpaqueWrites;
  const ParmVarDecl *P = Callee->getParamDecl(Param);
  if (!isNonConstReference(P->getType()))
    return false;
  const Stmt *Body = Callee->getBody();
  if (!Body)
    return Scope.OpaqueWrites || isLibraryFunction(*Callee);
  ASTContext &Ctx = Callee->getASTContext();
  LimitedParentMapScope Parents(*Callee, Ctx);
  return ExprMutationAnalyzer(*Body, Ctx).isMutated(P);
}

/// Library accessors that are non-const only to hand out a non-const
/// reference: calling one writes nothing.
bool isLibraryAccessor(const FunctionDecl *Callee) {
  const auto *Method = dyn_cast_or_null<CXXMethodDecl>(Callee);
  if (!Method || !isLibraryFunction(*Method))
    return false;
  switch (Method->getOverloadedOperator()) {
  case OO_Arrow:
  case OO_Star:
  case OO_Subscript:
    return true;
  case OO_None:
    break;
  default:
    return false;
  }
  if (!Method->getIdentifier())
    return false;
  return llvm::is_contained({"at", "front", "back", "begin", "end", "get",
                             "data", "ptr", "find"},
                            Method->getName());
}

void collectCallWrites(const CallExpr &Call, StorageOf Storage,
                       llvm::SmallVectorImpl<Location> &Out, WriteScope Scope) {
  const FunctionDecl *Callee = certainCallee(Call);
  if (isLibraryAccessor(Callee))
    return;
  unsigned FirstArgument = 0;
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&Call);
      Op && isa_and_nonnull<CXXMethodDecl>(Callee)) {
    FirstArgument = 1; // The object is the first argument.
    const auto *Method = cast<CXXMethodDecl>(Callee);
    if (!Method->isConst() && !Method->getParent()->isLambda())
      Out.push_back(Storage(Op->getArg(0)));
  }
  for (unsigned I = FirstArgument; I < Call.getNumArgs(); ++I) {
    const Expr *Arg = Call.getArg(I);
    unsigned Param = I - FirstArgument;
    bool ByReference =
        Callee && Param < Callee->getNumParams()
            ? isNonConstReference(Callee->getParamDecl(Param)->getType())
            : Arg->isLValue() || Arg->getType()->isPointerType();
    if (ByReference && mayChangeArgument(Callee, Param, Scope))
      if (Location L = Storage(Arg))
        Out.push_back(L);
  }
  if (const auto *Member = dyn_cast<CXXMemberCallExpr>(&Call)) {
    const auto *Method = dyn_cast_or_null<CXXMethodDecl>(Callee);
    const Expr *Object = Member->getImplicitObjectArgument();
    // LibTorch declares in-place tensor methods const: `x.resize_()`.
    bool InPlace = Method && Method->getIdentifier() &&
                   Method->getName().ends_with("_") &&
                   isTensorType(Object->getType());
    bool Changes = InPlace || (Method ? methodMayChangeObject(*Method, Scope)
                                      : Scope.OpaqueWrites);
    if (Changes)
      if (Location L = Storage(Object))
        Out.push_back(L);
  }
  // A lambda's call writes what it captured by reference and changes.
  if (const auto *Method = dyn_cast_or_null<CXXMethodDecl>(Callee);
      Method && Method->getParent()->isLambda() && Method->getBody()) {
    ASTContext &Ctx = Method->getASTContext();
    for (const LambdaCapture &Capture : Method->getParent()->captures()) {
      if (Capture.getCaptureKind() != LCK_ByRef || !Capture.capturesVariable())
        continue;
      const auto *Var = dyn_cast<VarDecl>(Capture.getCapturedVar());
      if (!Var)
        continue;
      LimitedParentMapScope Parents(*Method, Ctx);
      if (ExprMutationAnalyzer(*Method->getBody(), Ctx).isMutated(Var))
        Out.push_back(Var->hasLocalStorage() ? Location::local(Var)
                                             : Location::global(Var));
    }
  }
}

void collectWrites(const Stmt &S, StorageOf Storage,
                   llvm::SmallVectorImpl<Location> &Out, bool &Unknown,
                   WriteScope Scope) {
  auto Write = [&](const Expr *Target) {
    if (Location L = Storage(Target))
      Out.push_back(L);
    else
      Unknown = true;
  };
  if (const auto *DS = dyn_cast<DeclStmt>(&S)) {
    for (const Decl *D : DS->decls())
      if (const auto *Var = dyn_cast<VarDecl>(D))
        Out.push_back(Var->hasLocalStorage() ? Location::local(Var)
                                             : Location::global(Var));
    return;
  }
  if (const auto *BO = dyn_cast<BinaryOperator>(&S)) {
    if (BO->isAssignmentOp())
      Write(BO->getLHS());
    return;
  }
  if (const auto *UO = dyn_cast<UnaryOperator>(&S)) {
    if (UO->isIncrementDecrementOp())
      Write(UO->getSubExpr());
    return;
  }
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&S);
      Op && Op->getNumArgs() >= 1 &&
      (Op->isAssignmentOp() || Op->getOperator() == OO_PlusPlus ||
       Op->getOperator() == OO_MinusMinus)) {
    Write(Op->getArg(0));
    return;
  }
  if (const auto *Call = dyn_cast<CallExpr>(&S))
    collectCallWrites(*Call, Storage, Out, Scope);
}

} // namespace

llvm::SmallVector<const CallExpr *, 8> tryBlockWork(const CXXTryStmt &Try,
                                                    ASTContext &Ctx) {
  struct Visitor : RecursiveASTVisitor<Visitor> {
    ASTContext &Ctx;
    llvm::SmallVector<const CallExpr *, 8> Calls;
    explicit Visitor(ASTContext &Ctx) : Ctx(Ctx) {}
    bool TraverseLambdaExpr(LambdaExpr *) { return true; }
    bool VisitCallExpr(CallExpr *Call) {
      if (calleeKey(*Call) && isStatementLevelCall(*Call, Ctx))
        Calls.push_back(Call);
      return true;
    }
  } V(Ctx);
  V.TraverseStmt(const_cast<CompoundStmt *>(Try.getTryBlock()));
  return V.Calls;
}

//===--- The engine's side -------------------------------------------------===//

Location FlowModel::storageOf(const Expr *E) const {
  if (Location L = locationOf(E))
    return L;
  return writtenStorage(E);
}

void FlowModel::enterHandler(const CXXCatchStmt &Catch, const CXXTryStmt &Try,
                             State &St) const {
  if (!isOutOfMemoryHandler(Catch, options()))
    return;
  auto &Recoveries = St.recoveries();
  llvm::erase_if(Recoveries, [&](const OomRecovery &R) {
    return R.Handler == &Catch && !R.FailedCall;
  });
  OomRecovery Fresh;
  Fresh.Try = &Try;
  Fresh.Handler = &Catch;
  Recoveries.push_back(std::move(Fresh));
}

void FlowModel::trackRecoveries(const Stmt &S, State &St) const {
  auto &Recoveries = St.recoveries();
  const auto *Call = dyn_cast<CallExpr>(&S);
  // A callee that may return from an out-of-memory handler that emptied the
  // cache, and whose result the caller tests: the call is the failed work.
  const FunctionSummary *Callee = Call ? summaryAt(*Call, St) : nullptr;
  bool ReportsFailure =
      Callee && Callee->OomEmptyCache && resultIsUsed(*Call, Ctx);
  if (Recoveries.empty() && !ReportsFailure)
    return;
  llvm::SmallVector<Location, 4> Writes;
  bool Unknown = false;
  collectWrites(
      S, [this](const Expr *E) { return storageOf(E); }, Writes, Unknown,
      WriteScope());
  bool EmptiesCache = Call && isEmptyCacheCall(*Call, options());
  const SourceManager &SM = Ctx.getSourceManager();
  // The try block running again (or its work, retried) starts a new
  // attempt: what the old one wrote no longer matters, and a new
  // out-of-memory error enters the handler afresh.
  if (Call)
    llvm::erase_if(Recoveries, [&](const OomRecovery &R) {
      return R.EmptyCache && repeatsWork(*Call, R);
    });
  for (OomRecovery &R : Recoveries) {
    for (const Location &L : Writes)
      if (L)
        R.addWrite(L);
    R.WroteUnknown |= Unknown;
    if (EmptiesCache && !R.EmptyCache &&
        !R.FailedCall &&
        isWithin(S, R.Handler->getHandlerBlock()->getSourceRange(), SM))
      R.EmptyCache = Call;
  }
  if (ReportsFailure) {
    llvm::erase_if(Recoveries,
                   [&](const OomRecovery &R) { return R.FailedCall == Call; });
    OomRecovery Failed;
    Failed.Handler = Callee->OomHandler;
    Failed.EmptyCache = Callee->OomEmptyCache;
    Failed.FailedCall = Call;
    Recoveries.push_back(std::move(Failed));
  }
}

llvm::ArrayRef<const CallExpr *>
FlowModel::failedWork(const OomRecovery &R) const {
  if (R.FailedCall)
    return llvm::ArrayRef(R.FailedCall);
  auto [It, New] = TryWork.try_emplace(R.Try);
  if (New)
    It->second = tryBlockWork(*R.Try, Ctx);
  return It->second;
}

/// Whether \p Call calls \p F, the function it is written in, with F's own
/// parameters (and object): the whole body runs again on the same inputs.
static bool recursesUnchanged(const CallExpr &Call, const FunctionDecl &F) {
  const FunctionDecl *Pattern = F.getTemplateInstantiationPattern();
  if (calleeKey(Call) != (Pattern ? Pattern : &F)->getCanonicalDecl() ||
      Call.getNumArgs() != F.getNumParams() || isa<CXXOperatorCallExpr>(Call))
    return false;
  if (const auto *Member = dyn_cast<CXXMemberCallExpr>(&Call);
      Member && !isa<CXXThisExpr>(
                    Member->getImplicitObjectArgument()->IgnoreParenImpCasts()))
    return false;
  for (unsigned I = 0; I < Call.getNumArgs(); ++I) {
    const Expr *Arg = Call.getArg(I)->IgnoreParenImpCasts();
    if (const auto *Copy = dyn_cast<CXXConstructExpr>(Arg);
        Copy && Copy->getNumArgs() == 1)
      Arg = Copy->getArg(0)->IgnoreParenImpCasts();
    const auto *Ref = dyn_cast<DeclRefExpr>(Arg);
    if (!Ref || Ref->getDecl() != F.getParamDecl(I))
      return false;
  }
  return true;
}

bool FlowModel::repeatsWork(const CallExpr &Call, const OomRecovery &R) const {
  const FunctionDecl *Key = calleeKey(Call);
  if (!Key)
    return false;
  if (!R.FailedCall && Function && recursesUnchanged(Call, *Function))
    return true;
  llvm::ArrayRef<const CallExpr *> Work = failedWork(R);
  std::string Spelled = spelling(Call, Ctx);
  bool Repeats =
      !Spelled.empty() && llvm::any_of(Work, [&](const CallExpr *C) {
        return calleeKey(*C) == Key && spelling(*C, Ctx) == Spelled;
      });
  // A bare `reset()` or `zero_grad()` is clean-up, not the work, unless it
  // is all the try block did.
  return Repeats && (hasSpelledArgument(Call) || Work.size() == 1);
}

const OomRecovery *FlowModel::recoveryRetriedBy(const CallExpr &Call,
                                                const State &St) const {
  for (const OomRecovery &R : St.recoveries()) {
    if (!R.EmptyCache || R.WroteUnknown || !repeatsWork(Call, R))
      continue;
    if (llvm::none_of(failedWork(R), [&](const CallExpr *C) {
          return readsChangedInput(*C, R);
        }))
      return &R;
  }
  return nullptr;
}

bool FlowModel::readsChangedInput(const CallExpr &Work,
                                  const OomRecovery &R) const {
  const SourceManager &SM = Ctx.getSourceManager();
  SourceRange TryBlock = R.Try ? R.Try->getTryBlock()->getSourceRange()
                               : SourceRange();
  // What the work itself writes, apart from the weights and optimizer
  // state it trains: a loader it advances, a counter it bumps. Each attempt
  // then runs on different inputs.
  llvm::SmallVector<Location, 4> OwnWrites;
  bool Unknown = false;
  struct Inputs : RecursiveASTVisitor<Inputs> {
    const FlowModel &M;
    llvm::SmallVector<const Expr *, 8> Reads;
    llvm::SmallVector<const Stmt *, 8> Nodes;
    explicit Inputs(const FlowModel &M) : M(M) {}
    bool TraverseLambdaExpr(LambdaExpr *) { return true; }
    bool TraverseMemberExpr(MemberExpr *Member) {
      Nodes.push_back(Member);
      Reads.push_back(Member);
      // `options.batch_size` reads that field, not all of `options`.
      if (isa<FieldDecl>(Member->getMemberDecl()))
        return true;
      return RecursiveASTVisitor::TraverseMemberExpr(Member);
    }
    bool VisitDeclRefExpr(DeclRefExpr *Ref) {
      if (isa<VarDecl>(Ref->getDecl()))
        Reads.push_back(Ref);
      return true;
    }
    bool VisitCXXThisExpr(CXXThisExpr *This) {
      Reads.push_back(This);
      return true;
    }
    bool VisitStmt(Stmt *S) {
      Nodes.push_back(S);
      return true;
    }
  } V(*this);
  V.TraverseStmt(const_cast<CallExpr *>(&Work));
  for (const Stmt *Node : V.Nodes)
    collectWrites(
        *Node, [this](const Expr *E) { return storageOf(E); }, OwnWrites,
        Unknown, WriteScope{2, /*OpaqueWrites=*/false});
  llvm::erase_if(OwnWrites, isSizeNeutral);
  auto Changed = [&](const Location &L) {
    if (!L)
      return false;
    // A variable of the try block is new on every attempt.
    if (L.Kind == Location::Local && L.Root && TryBlock.isValid() &&
        SM.isPointWithin(L.Root->getLocation(), TryBlock.getBegin(),
                         TryBlock.getEnd()))
      return false;
    if (L.Root && Escaped.contains(L.Root))
      return true;
    return R.wrote(L) || llvm::any_of(OwnWrites, [&](const Location &W) {
             return W.hasPrefix(L) || L.hasPrefix(W);
           });
  };
  // A reference reads what it is bound to, and is rebound when declared
  // again (a range-for's element).
  return llvm::any_of(V.Reads, [&](const Expr *Read) {
    return Changed(storageOf(Read)) || Changed(writtenStorage(Read));
  });
}

} // namespace clang::tidy::torch
