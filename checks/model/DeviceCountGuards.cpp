//===--- DeviceCountGuards.cpp - torch-tidy -------------------------------===//

#include "DeviceCountGuards.h"
#include "ProgramModel.h"
#include "model/UserCodeParents.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/StmtCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "llvm/ADT/DenseSet.h"

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

struct DeviceCountGuards::FunctionGuards {
  /// What holds in the whole function.
  Proof Wide;
  /// Comparisons against a value, each with the statement it controls.
  llvm::SmallVector<std::pair<const Expr *, const Stmt *>, 2> Scoped;
};

namespace {

/// Whether \p S always leaves the enclosing block: `return`, `throw`,
/// `break`, `continue`, or a block that ends with one.
bool exits(const Stmt *S) {
  if (!S)
    return false;
  if (const auto *CS = dyn_cast<CompoundStmt>(S))
    return !CS->body_empty() && exits(CS->body_back());
  if (const auto *E = dyn_cast<Expr>(S))
    return isa<CXXThrowExpr>(E->IgnoreParenImpCasts());
  return isa<ReturnStmt, BreakStmt, ContinueStmt>(S);
}

/// The statement whose running \p Comparison decides: the `if` (unless its
/// branch exits early: then the rest of the function), the loop, the `?:`.
const Stmt *controlledStatement(const Expr &Comparison, ASTContext &Ctx) {
  DynTypedNode Child = DynTypedNode::create(Comparison);
  for (unsigned Depth = 0; Depth < 16; ++Depth) {
    llvm::ArrayRef<DynTypedNode> Parents = userCodeParents(Child, Ctx);
    const Stmt *Parent = Parents.empty() ? nullptr : Parents[0].get<Stmt>();
    const Stmt *C = Child.get<Stmt>();
    if (!Parent || !C)
      return nullptr;
    if (const auto *If = dyn_cast<IfStmt>(Parent))
      return If->getCond() == C && !exits(If->getThen()) ? If : nullptr;
    if (const auto *For = dyn_cast<ForStmt>(Parent))
      return For->getCond() == C ? For : nullptr;
    if (const auto *While = dyn_cast<WhileStmt>(Parent))
      return While->getCond() == C ? While : nullptr;
    if (const auto *Do = dyn_cast<DoStmt>(Parent))
      return Do->getCond() == C ? Do : nullptr;
    if (const auto *Cond = dyn_cast<ConditionalOperator>(Parent))
      return Cond->getCond() == C ? Cond : nullptr;
    // Part of a larger condition.
    if (const auto *BO = dyn_cast<BinaryOperator>(Parent);
        BO && !BO->isLogicalOp())
      return nullptr;
    if (const auto *UO = dyn_cast<UnaryOperator>(Parent);
        UO && UO->getOpcode() != UO_LNot)
      return nullptr;
    if (!isa<BinaryOperator, UnaryOperator, ParenExpr, ImplicitCastExpr,
             ExprWithCleanups>(Parent))
      return nullptr;
    Child = Parents[0];
  }
  return nullptr;
}

bool contains(const Stmt &Scope, const Expr &Site, const SourceManager &SM) {
  SourceLocation L = SM.getExpansionLoc(Site.getBeginLoc());
  SourceRange R(SM.getExpansionLoc(Scope.getBeginLoc()),
                SM.getExpansionLoc(Scope.getEndLoc()));
  return !SM.isBeforeInTranslationUnit(L, R.getBegin()) &&
         !SM.isBeforeInTranslationUnit(R.getEnd(), L);
}

/// The function whose body contains \p E; lambdas count as part of the
/// function they are written in. Null at namespace or class scope.
const FunctionDecl *enclosingFunction(const Expr &E, ASTContext &Ctx) {
  DynTypedNode Node = DynTypedNode::create(E);
  for (unsigned Depth = 0; Depth < 1024; ++Depth) {
    llvm::ArrayRef<DynTypedNode> Parents = userCodeParents(Node, Ctx);
    if (Parents.empty())
      return nullptr;
    const DynTypedNode &Parent = Parents[0];
    if (const auto *Function = Parent.get<FunctionDecl>()) {
      const auto *Method = dyn_cast<CXXMethodDecl>(Function);
      if (!Method || !Method->getParent()->isLambda())
        return Function;
      Node = DynTypedNode::create(*Method->getParent());
      continue;
    }
    if (Parent.get<TranslationUnitDecl>())
      return nullptr;
    Node = Parent;
  }
  return nullptr;
}

/// What runs when \p Function runs: its body and member initialisers.
llvm::SmallVector<const Stmt *, 4> functionRoots(const FunctionDecl &Function) {
  llvm::SmallVector<const Stmt *, 4> Roots;
  if (const auto *Constructor = dyn_cast<CXXConstructorDecl>(&Function))
    for (const CXXCtorInitializer *Init : Constructor->inits())
      if (Init->isWritten() && Init->getInit())
        Roots.push_back(Init->getInit());
  if (const Stmt *Body = Function.getBody())
    Roots.push_back(Body);
  return Roots;
}

/// What the `device_count()` comparisons in a set of statements prove.
class GuardScanner {
public:
  GuardScanner(llvm::ArrayRef<std::string> CountFunctions, ASTContext &Ctx,
               bool SkipSystemHeaders)
      : CountFunctions(CountFunctions), Ctx(Ctx),
        SkipSystemHeaders(SkipSystemHeaders) {}

  /// Scans \p Roots (function bodies and constructor initialisers) as one
  /// scope: a count stored in one of them may be compared in another.
  DeviceCountGuards::FunctionGuards scan(llvm::ArrayRef<const Stmt *> Roots) {
    for (const Stmt *Root : Roots)
      collectCountVariables(*Root);
    DeviceCountGuards::FunctionGuards Out;
    for (const Stmt *Root : Roots)
      for (const auto &Match :
           match(findAll(binaryOperator(isComparisonOperator()).bind("cmp")),
                 *Root, Ctx)) {
        const auto *Comparison = Match.getNodeAs<BinaryOperator>("cmp");
        if (SkipSystemHeaders &&
            Ctx.getSourceManager().isInSystemHeader(Comparison->getExprLoc()))
          continue;
        bool AgainstAValue = false;
        std::optional<int64_t> Proven =
            provenOrdinals(*Comparison, AgainstAValue);
        if (!Proven)
          continue;
        if (AgainstAValue)
          if (const Stmt *Scope = controlledStatement(*Comparison, Ctx)) {
            Out.Scoped.push_back({Comparison, Scope});
            continue;
          }
        if (!Out.Wide.Comparison || *Proven > Out.Wide.GuardedUpTo)
          Out.Wide = {*Proven, Comparison};
      }
    return Out;
  }

private:
  void collectCountVariables(const Stmt &Root) {
    std::vector<llvm::StringRef> Names(CountFunctions.begin(),
                                       CountFunctions.end());
    auto CountCall = callExpr(callee(functionDecl(hasAnyName(Names))));
    auto CountVar = varDecl().bind("var");
    // `auto n = device_count();`, `n = device_count();`,
    // `cudaGetDeviceCount(&n);`.
    for (const auto &Match :
         match(findAll(stmt(anyOf(
                   declStmt(has(
                       varDecl(hasInitializer(ignoringParenCasts(CountCall)))
                           .bind("var"))),
                   binaryOperator(isAssignmentOperator(),
                                  hasLHS(declRefExpr(to(CountVar))),
                                  hasRHS(ignoringParenCasts(CountCall))),
                   callExpr(
                       callee(functionDecl(hasName("::cudaGetDeviceCount"))),
                       hasArgument(0, unaryOperator(hasOperatorName("&"),
                                                    hasUnaryOperand(declRefExpr(
                                                        to(CountVar))))))))),
               Root, Ctx))
      CountVariables.insert(Match.getNodeAs<VarDecl>("var"));
  }

  bool isCountCall(const Expr *E) const {
    const auto *Call = dyn_cast<CallExpr>(E);
    const FunctionDecl *Callee = Call ? Call->getDirectCallee() : nullptr;
    if (!Callee)
      return false;
    std::string Name = Callee->getQualifiedNameAsString();
    // The same rule as `hasAnyName`: a leading `::` anchors the name,
    // otherwise it may be the tail of a longer qualified name.
    return llvm::any_of(CountFunctions, [&](llvm::StringRef Wanted) {
      if (Wanted.consume_front("::"))
        return Name == Wanted;
      return Name == Wanted || StringRef(Name).ends_with(("::" + Wanted).str());
    });
  }
  /// The device count itself, possibly cast.
  bool isCount(const Expr *E) const {
    E = E->IgnoreParenCasts();
    if (const auto *Ref = dyn_cast<DeclRefExpr>(E))
      return CountVariables.contains(Ref->getDecl());
    return isCountCall(E);
  }
  bool mentionsCount(const Stmt *S) const {
    if (!S)
      return false;
    if (const auto *E = dyn_cast<Expr>(S); E && isCount(E))
      return true;
    return llvm::any_of(S->children(),
                        [this](const Stmt *C) { return mentionsCount(C); });
  }

  /// The highest ordinal that \p Comparison proves to exist, read in the
  /// direction that lets the code go on (`count > K` or, as an early exit,
  /// `count < K`); null when it does not involve the device count.
  std::optional<int64_t> provenOrdinals(const BinaryOperator &Comparison,
                                        bool &AgainstAValue) const {
    const Expr *Lhs = Comparison.getLHS(), *Rhs = Comparison.getRHS();
    bool CountLeft = mentionsCount(Lhs), CountRight = mentionsCount(Rhs);
    if (!CountLeft && !CountRight)
      return std::nullopt;
    if (CountLeft && CountRight)
      return DeviceCountGuards::EveryOrdinal;
    BinaryOperatorKind Op = Comparison.getOpcode();
    const Expr *Count = Lhs, *Bound = Rhs;
    if (CountRight) {
      std::swap(Count, Bound);
      Op = BinaryOperator::reverseComparisonOp(Op);
    }
    Expr::EvalResult Value;
    // Arithmetic on the count, or a bound that is not a constant (an ordinal
    // the program picks, a world size): assume it guards what it controls.
    if (!isCount(Count) || Bound->isValueDependent() ||
        !Bound->EvaluateAsInt(Value, Ctx)) {
      AgainstAValue = true;
      return DeviceCountGuards::EveryOrdinal;
    }
    const llvm::APSInt &BoundValue = Value.Val.getInt();
    if (BoundValue.getSignificantBits() > 62)
      return DeviceCountGuards::EveryOrdinal;
    int64_t K = BoundValue.getExtValue();
    switch (Op) {
    case BO_GT: // count > K: ordinals 0..K exist.
    case BO_LE: // if (count <= K) bail out.
      return K;
    default: // count >= K, count < K, count == K, count != K.
      return K - 1;
    }
  }

  llvm::ArrayRef<std::string> CountFunctions;
  ASTContext &Ctx;
  bool SkipSystemHeaders;
  llvm::DenseSet<const Decl *> CountVariables;
};


} // namespace

DeviceCountGuards::DeviceCountGuards(ProgramModel &Program,
                                     std::vector<std::string> CountFunctions)
    : Program(Program), CountFunctions(std::move(CountFunctions)) {}

DeviceCountGuards::~DeviceCountGuards() = default;

const DeviceCountGuards::FunctionGuards &
DeviceCountGuards::guardsIn(const FunctionDecl &Function) {
  const FunctionDecl *Key = Function.getCanonicalDecl();
  auto It = Cache.find(Key);
  if (It != Cache.end())
    return *It->second;
  auto Guards = std::make_unique<FunctionGuards>();
  const FunctionDecl *Definition = nullptr;
  if (Function.hasBody(Definition) && Definition)
    *Guards = GuardScanner(CountFunctions, Program.context(),
                           /*SkipSystemHeaders=*/false)
                  .scan(functionRoots(*Definition));
  return *Cache.try_emplace(Key, std::move(Guards)).first->second;
}

DeviceCountGuards::Proof
DeviceCountGuards::within(const FunctionDecl &Function, const Expr &Site) {
  const FunctionGuards &G = guardsIn(Function);
  Proof Best = G.Wide;
  const SourceManager &SM = Program.context().getSourceManager();
  for (const auto &[Comparison, Scope] : G.Scoped)
    if (contains(*Scope, Site, SM))
      return {EveryOrdinal, Comparison};
  return Best;
}

DeviceCountGuards::Proof DeviceCountGuards::at(const Expr &Site) {
  ASTContext &Ctx = Program.context();
  const FunctionDecl *Function = enclosingFunction(Site, Ctx);
  if (!Function) {
    // Namespace- or class-scope initialisers: any check in the file counts.
    if (!TranslationUnit) {
      std::vector<const Stmt *> Roots;
      for (const auto &Entry : Program.callGraph())
        if (const auto *FD = dyn_cast_or_null<FunctionDecl>(Entry.first)) {
          const FunctionDecl *Definition = nullptr;
          if (FD->hasBody(Definition) && Definition &&
              !isSystemHeaderDecl(*Definition, Ctx.getSourceManager()))
            llvm::append_range(Roots, functionRoots(*Definition));
        }
      TranslationUnit = GuardScanner(CountFunctions, Ctx,
                                     /*SkipSystemHeaders=*/true)
                            .scan(Roots)
                            .Wide;
    }
    return *TranslationUnit;
  }
  Proof Best = within(*Function, Site);
  // A caller that checks the count before calling also guards: precision
  // comes first, so one guarded call path is enough to stay silent.
  constexpr unsigned MaxCallerDepth = 4;
  llvm::SmallVector<const FunctionDecl *, 8> Frontier = {Function};
  llvm::DenseSet<const FunctionDecl *> Seen = {Function->getCanonicalDecl()};
  for (unsigned Depth = 0;
       Depth < MaxCallerDepth && !Frontier.empty() && Best.GuardedUpTo != EveryOrdinal;
       ++Depth) {
    llvm::SmallVector<const FunctionDecl *, 8> Next;
    for (const FunctionDecl *Callee : Frontier)
      for (const CallSite &S : Program.callSitesOf(*Callee)) {
        if (!S.Caller)
          continue;
        Proof AtCall = within(*S.Caller, *S.Call);
        if (AtCall.Comparison &&
            (!Best.Comparison || AtCall.GuardedUpTo > Best.GuardedUpTo))
          Best = AtCall;
        if (Seen.insert(S.Caller->getCanonicalDecl()).second)
          Next.push_back(S.Caller);
      }
    Frontier = std::move(Next);
  }
  return Best;
}

} // namespace clang::tidy::torch
