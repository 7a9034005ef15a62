//===--- DeviceIndexUncheckedCheck.cpp - torch-tidy -----------------------===//

#include "DeviceIndexUncheckedCheck.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "utils/TorchMatchers.h"
#include "utils/UserCodeParents.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include <limits>

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

namespace {

using GuardFacts = DeviceIndexUncheckedCheck::GuardFacts;

constexpr int64_t GuardsEveryOrdinal = std::numeric_limits<int64_t>::max();
/// How many levels of callers may hold the `device_count()` check.
constexpr unsigned MaxCallerDepth = 4;

/// Strips what the compiler adds around a spelled argument: implicit
/// conversions, temporaries, parentheses, and the `std::string` built from
/// a string literal on its way to `Device(const std::string &)`.
const Expr *spelledArgument(const Expr *E) {
  while (E) {
    const Expr *Next = E->IgnoreImplicit()->IgnoreParens();
    if (const auto *Construct = dyn_cast<CXXConstructExpr>(Next)) {
      const CXXRecordDecl *Class = Construct->getConstructor()->getParent();
      if (Construct->getNumArgs() >= 1 && Class->isInStdNamespace() &&
          (Class->getName() == "basic_string" ||
           Class->getName() == "basic_string_view"))
        Next = Construct->getArg(0);
    } else if (const auto *Cast = dyn_cast<CXXFunctionalCastExpr>(Next)) {
      Next = Cast->getSubExpr();
    }
    if (Next == E)
      return E;
    E = Next;
  }
  return E;
}

bool isCudaDeviceType(const Expr *E, const ASTContext &Ctx) {
  E = spelledArgument(E);
  if (!isDeviceTypeEnum(E->getType()) || E->isValueDependent())
    return false;
  const auto *Enum = E->getType().getCanonicalType()->getAs<EnumType>();
  Expr::EvalResult Value;
  if (!Enum || !E->EvaluateAsInt(Value, Ctx))
    return false;
  for (const EnumConstantDecl *Constant : Enum->getDecl()->enumerators())
    if (Constant->getName() == "CUDA")
      return llvm::APSInt::isSameValue(Constant->getInitVal(),
                                       Value.Val.getInt());
  return false;
}

/// A hard-coded ordinal and where it is spelt.
struct LiteralOrdinal {
  int64_t Value = -1;
  SourceLocation Loc;
};

std::optional<LiteralOrdinal> integerOrdinal(const Expr *E) {
  const auto *Literal = dyn_cast<IntegerLiteral>(spelledArgument(E));
  if (!Literal || Literal->getValue().getActiveBits() > 31)
    return std::nullopt;
  return LiteralOrdinal{
      static_cast<int64_t>(Literal->getValue().getZExtValue()),
      Literal->getLocation()};
}

/// `"cuda:N"`, the string form a `Device` is parsed from.
std::optional<LiteralOrdinal> stringOrdinal(const Expr *E) {
  const auto *Literal = dyn_cast<StringLiteral>(spelledArgument(E));
  if (!Literal || !Literal->isOrdinary())
    return std::nullopt;
  StringRef Text = Literal->getString();
  unsigned Ordinal = 0;
  if (!Text.consume_front("cuda:") || Text.getAsInteger(10, Ordinal) ||
      Ordinal > std::numeric_limits<int16_t>::max())
    return std::nullopt;
  return LiteralOrdinal{Ordinal, Literal->getBeginLoc()};
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

const FunctionDecl *callGraphKey(const FunctionDecl *Function) {
  if (const FunctionDecl *Pattern = Function->getTemplateInstantiationPattern())
    Function = Pattern;
  return Function->getCanonicalDecl();
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

bool isLambdaCallOperator(const Decl *D) {
  const auto *Method = dyn_cast<CXXMethodDecl>(D);
  return Method && Method->getParent()->isLambda();
}

/// Records which function of the user's code calls which.
class CallerCollector : public RecursiveASTVisitor<CallerCollector> {
public:
  using CallerMap = llvm::DenseMap<const FunctionDecl *,
                                   llvm::SmallVector<const FunctionDecl *, 2>>;
  CallerCollector(const SourceManager &SM, CallerMap &Callers,
                  std::vector<const Stmt *> &UserRoots)
      : SM(SM), Callers(Callers), UserRoots(UserRoots) {}

  bool TraverseDecl(Decl *D) {
    if (!D)
      return true;
    // LibTorch's own headers cannot guard the user's ordinals.
    if (isSystemHeaderDecl(*D, SM))
      return true;
    const auto *Function = dyn_cast<FunctionDecl>(D);
    if (!Function || !Function->doesThisDeclarationHaveABody() ||
        isLambdaCallOperator(D))
      return RecursiveASTVisitor::TraverseDecl(D);
    llvm::append_range(UserRoots, functionRoots(*Function));
    const FunctionDecl *Outer = Current;
    Current = Function;
    bool Continue = RecursiveASTVisitor::TraverseDecl(D);
    Current = Outer;
    return Continue;
  }
  bool VisitCallExpr(CallExpr *Call) {
    record(Call->getDirectCallee());
    return true;
  }
  bool VisitCXXConstructExpr(CXXConstructExpr *Construct) {
    record(Construct->getConstructor());
    return true;
  }

private:
  void record(const FunctionDecl *Callee) {
    if (!Current || !Callee)
      return;
    auto &List = Callers[callGraphKey(Callee)];
    if (!llvm::is_contained(List, Current))
      List.push_back(Current);
  }

  const SourceManager &SM;
  CallerMap &Callers;
  std::vector<const Stmt *> &UserRoots;
  const FunctionDecl *Current = nullptr;
};

/// What the `device_count()` comparisons in a set of statements prove.
class GuardScanner {
public:
  GuardScanner(llvm::ArrayRef<StringRef> CountFunctions, ASTContext &Ctx,
               bool SkipSystemHeaders)
      : CountFunctions(CountFunctions), Ctx(Ctx),
        SkipSystemHeaders(SkipSystemHeaders) {}

  /// Scans \p Roots (function bodies and constructor initialisers) as one
  /// scope: a count stored in one of them may be compared in another.
  GuardFacts scan(llvm::ArrayRef<const Stmt *> Roots) {
    for (const Stmt *Root : Roots)
      collectCountVariables(*Root);
    GuardFacts Facts;
    for (const Stmt *Root : Roots)
      for (const auto &Match :
           match(findAll(binaryOperator(isComparisonOperator()).bind("cmp")),
                 *Root, Ctx)) {
        const auto *Comparison = Match.getNodeAs<BinaryOperator>("cmp");
        if (SkipSystemHeaders &&
            Ctx.getSourceManager().isInSystemHeader(Comparison->getExprLoc()))
          continue;
        std::optional<int64_t> Proven = provenOrdinals(*Comparison);
        if (Proven && (!Facts.Comparison || *Proven > Facts.GuardedUpTo)) {
          Facts.GuardedUpTo = *Proven;
          Facts.Comparison = Comparison;
        }
      }
    return Facts;
  }

private:
  void collectCountVariables(const Stmt &Root) {
    auto CountCall = callExpr(callee(functionDecl(hasAnyName(CountFunctions))));
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
    return llvm::any_of(CountFunctions, [&](StringRef Wanted) {
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
  std::optional<int64_t>
  provenOrdinals(const BinaryOperator &Comparison) const {
    const Expr *Lhs = Comparison.getLHS(), *Rhs = Comparison.getRHS();
    bool CountLeft = mentionsCount(Lhs), CountRight = mentionsCount(Rhs);
    if (!CountLeft && !CountRight)
      return std::nullopt;
    if (CountLeft && CountRight)
      return GuardsEveryOrdinal;
    BinaryOperatorKind Op = Comparison.getOpcode();
    const Expr *Count = Lhs, *Bound = Rhs;
    if (CountRight) {
      std::swap(Count, Bound);
      Op = BinaryOperator::reverseComparisonOp(Op);
    }
    Expr::EvalResult Value;
    // Arithmetic on the count, or a bound that is not a constant (an ordinal
    // the program picks, a world size): assume it guards.
    if (!isCount(Count) || Bound->isValueDependent() ||
        !Bound->EvaluateAsInt(Value, Ctx))
      return GuardsEveryOrdinal;
    const llvm::APSInt &BoundValue = Value.Val.getInt();
    if (BoundValue.getSignificantBits() > 62)
      return GuardsEveryOrdinal;
    int64_t K = BoundValue.getExtValue();
    switch (Op) {
    case BO_GT: // count > K: ordinals 0..K exist.
    case BO_LE: // if (count <= K) bail out.
      return K;
    default: // count >= K, count < K, count == K, count != K.
      return K - 1;
    }
  }

  llvm::ArrayRef<StringRef> CountFunctions;
  ASTContext &Ctx;
  bool SkipSystemHeaders;
  llvm::DenseSet<const Decl *> CountVariables;
};

} // namespace

DeviceIndexUncheckedCheck::DeviceIndexUncheckedCheck(StringRef Name,
                                                     ClangTidyContext *Context)
    : ClangTidyCheck(Name, Context), UserCode(Context),
      ExtraDeviceCountFunctions(Options.get("ExtraDeviceCountFunctions", "")) {
  CountFunctions.assign(deviceCountFunctionNames().begin(),
                        deviceCountFunctionNames().end());
  for (StringRef Extra :
       utils::options::parseStringList(ExtraDeviceCountFunctions))
    CountFunctions.push_back(Extra);
}

void DeviceIndexUncheckedCheck::storeOptions(
    ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraDeviceCountFunctions", ExtraDeviceCountFunctions);
}

void DeviceIndexUncheckedCheck::onStartOfTranslationUnit() {
  GuardCache.clear();
  TranslationUnitGuards.reset();
  UserRoots.clear();
  Callers.reset();
  Reported.clear();
}

void DeviceIndexUncheckedCheck::registerMatchers(MatchFinder *Finder) {
  UserCode.registerMatchers(Finder);
  auto InUserCode = allOf(unless(isExpansionInSystemHeader()),
                          unless(isInUserTemplateInstantiation()));
  // `Device(kCUDA, 1)`, `Device("cuda:1")`, and the `TensorOptions`
  // constructors that forward to them.
  Finder->addMatcher(
      cxxConstructExpr(hasDeclaration(cxxConstructorDecl(ofClass(hasAnyName(
                           "::c10::Device", "::c10::TensorOptions")))),
                       InUserCode)
          .bind("site"),
      this);
  // `TensorOptions().device(kCUDA, 1)`, `.device("cuda:1")`,
  // `.device_index(1)` and the free `device_index(1)`.
  Finder->addMatcher(
      cxxMemberCallExpr(
          callee(cxxMethodDecl(hasAnyName("device", "device_index"),
                               ofClass(hasName("::c10::TensorOptions")))),
          InUserCode)
          .bind("site"),
      this);
  Finder->addMatcher(
      callExpr(callee(functionDecl(hasName("::c10::device_index"))), InUserCode)
          .bind("site"),
      this);
}

void DeviceIndexUncheckedCheck::check(const MatchFinder::MatchResult &Result) {
  const auto *Site = Result.Nodes.getNodeAs<Expr>("site");
  llvm::SmallVector<const Expr *, 2> Args;
  StringRef Callee;
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(Site)) {
    Args.append(Construct->arg_begin(), Construct->arg_end());
  } else if (const auto *Call = dyn_cast<CallExpr>(Site)) {
    Args.append(Call->arg_begin(), Call->arg_end());
    if (const FunctionDecl *Function = Call->getDirectCallee())
      Callee = Function->getName();
  }
  llvm::erase_if(Args,
                 [](const Expr *Arg) { return isa<CXXDefaultArgExpr>(Arg); });

  std::optional<LiteralOrdinal> Ordinal;
  if (Callee == "device_index") {
    if (Args.size() == 1)
      Ordinal = integerOrdinal(Args[0]);
  } else if (Args.size() == 2) {
    if (isCudaDeviceType(Args[0], *Result.Context))
      Ordinal = integerOrdinal(Args[1]);
  } else if (Args.size() == 1) {
    Ordinal = stringOrdinal(Args[0]);
  }
  if (Ordinal && Ordinal->Value > 0)
    reportOrdinal(*Site, Ordinal->Loc, Ordinal->Value, *Result.Context);
}

void DeviceIndexUncheckedCheck::reportOrdinal(const Expr &Site,
                                              SourceLocation OrdinalLoc,
                                              int64_t Ordinal,
                                              ASTContext &Ctx) {
  GuardFacts Facts;
  if (const FunctionDecl *Function = enclosingFunction(Site, Ctx)) {
    Facts = guardsOnCallPaths(*Function, Ctx);
  } else {
    // Namespace- or class-scope initialisers: any check in the file counts.
    if (!Callers)
      buildCallers(Ctx);
    if (!TranslationUnitGuards)
      TranslationUnitGuards =
          GuardScanner(CountFunctions, Ctx, /*SkipSystemHeaders=*/true)
              .scan(UserRoots);
    Facts = *TranslationUnitGuards;
  }
  if (Ordinal <= Facts.GuardedUpTo || !Reported.insert(OrdinalLoc).second)
    return;

  if (!Facts.Comparison || Facts.GuardedUpTo < 0) {
    diag(OrdinalLoc, "hard-coded CUDA device ordinal %0 is never checked "
                     "against torch::cuda::device_count(); "
                     "CUDA_VISIBLE_DEVICES renumbers the devices a process "
                     "sees, so ordinal %0 may not exist")
        << static_cast<int>(Ordinal);
    return;
  }
  diag(OrdinalLoc,
       "hard-coded CUDA device ordinal %0 is above what the "
       "torch::cuda::device_count() check proves (%1 "
       "%plural{1:device|:devices}1); CUDA_VISIBLE_DEVICES renumbers the "
       "devices a process sees, so ordinal %0 may not exist")
      << static_cast<int>(Ordinal) << static_cast<int>(Facts.GuardedUpTo + 1);
  diag(Facts.Comparison->getExprLoc(), "the device count is compared here",
       DiagnosticIDs::Note);
}

const GuardFacts &
DeviceIndexUncheckedCheck::guardsInFunction(const FunctionDecl &Function,
                                            ASTContext &Ctx) {
  const FunctionDecl *Key = callGraphKey(&Function);
  auto It = GuardCache.find(Key);
  if (It != GuardCache.end())
    return It->second;
  const FunctionDecl *Definition = Key->getDefinition();
  GuardFacts Facts;
  if (Definition)
    Facts = GuardScanner(CountFunctions, Ctx, /*SkipSystemHeaders=*/false)
                .scan(functionRoots(*Definition));
  return GuardCache.try_emplace(Key, Facts).first->second;
}

GuardFacts
DeviceIndexUncheckedCheck::guardsOnCallPaths(const FunctionDecl &Function,
                                             ASTContext &Ctx) {
  GuardFacts Best = guardsInFunction(Function, Ctx);
  if (Best.GuardedUpTo == GuardsEveryOrdinal)
    return Best;
  // A caller that checks the count before calling also guards: precision
  // comes first, so one guarded call path is enough to stay silent.
  if (!Callers)
    buildCallers(Ctx);
  llvm::SmallVector<const FunctionDecl *, 8> Frontier = {
      callGraphKey(&Function)};
  llvm::DenseSet<const FunctionDecl *> Seen(Frontier.begin(), Frontier.end());
  for (unsigned Depth = 0; Depth < MaxCallerDepth && !Frontier.empty();
       ++Depth) {
    llvm::SmallVector<const FunctionDecl *, 8> Next;
    for (const FunctionDecl *Callee : Frontier) {
      auto It = Callers->find(Callee);
      if (It == Callers->end())
        continue;
      for (const FunctionDecl *Caller : It->second) {
        const FunctionDecl *Key = callGraphKey(Caller);
        if (!Seen.insert(Key).second)
          continue;
        const GuardFacts &Facts = guardsInFunction(*Caller, Ctx);
        if (Facts.Comparison &&
            (!Best.Comparison || Facts.GuardedUpTo > Best.GuardedUpTo))
          Best = Facts;
        Next.push_back(Key);
      }
    }
    Frontier = std::move(Next);
  }
  return Best;
}

void DeviceIndexUncheckedCheck::buildCallers(ASTContext &Ctx) {
  Callers.emplace();
  UserRoots.clear();
  CallerCollector(Ctx.getSourceManager(), *Callers, UserRoots)
      .TraverseDecl(Ctx.getTranslationUnitDecl());
}

} // namespace clang::tidy::torch
