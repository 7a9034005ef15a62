//===--- LossAccumulationGraphCheck.cpp - torch-tidy ----------------------===//

#include "LossAccumulationGraphCheck.h"
#include "analysis/TensorFlowAnalysis.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "utils/GradMode.h"
#include "utils/TorchMatchers.h"
#include "utils/UserCodeParents.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/Lex/Lexer.h"

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

LossAccumulationGraphCheck::LossAccumulationGraphCheck(
    StringRef Name, ClangTidyContext *Context)
    : ClangTidyCheck(Name, Context), UserCode(Context),
      RawBackwardFunctions(Options.get("BackwardFunctions", "")),
      RawAccumulatingFunctions(Options.get("AccumulatingFunctions", "")),
      RawGuardTypes(Options.get("GuardTypes", "")) {
  LoopOptions.ExtraBackwardFunctions = parseNameList(RawBackwardFunctions);
  AccumulatingFunctions = parseNameList(RawAccumulatingFunctions);
  GuardTypes = parseNameList(RawGuardTypes);
}

LossAccumulationGraphCheck::~LossAccumulationGraphCheck() = default;

void LossAccumulationGraphCheck::storeOptions(
    ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "BackwardFunctions", RawBackwardFunctions);
  Options.store(Opts, "AccumulatingFunctions", RawAccumulatingFunctions);
  Options.store(Opts, "GuardTypes", RawGuardTypes);
}

void LossAccumulationGraphCheck::registerMatchers(MatchFinder *Finder) {
  UserCode.registerMatchers(Finder);
  registerAnalyzedBodyMatchers(*Finder, *this);
}

void LossAccumulationGraphCheck::onStartOfTranslationUnit() {
  Oracle.reset();
  OracleContext = nullptr;
}

/// `a` and `b` denote the same variable or field chain.
static bool sameStorage(const Expr *A, const Expr *B) {
  A = A->IgnoreParenImpCasts();
  B = B->IgnoreParenImpCasts();
  if (const auto *RA = dyn_cast<DeclRefExpr>(A)) {
    const auto *RB = dyn_cast<DeclRefExpr>(B);
    return RB && RA->getDecl() == RB->getDecl();
  }
  if (const auto *MA = dyn_cast<MemberExpr>(A)) {
    const auto *MB = dyn_cast<MemberExpr>(B);
    return MB && MA->getMemberDecl() == MB->getMemberDecl() &&
           MA->isArrow() == MB->isArrow() &&
           sameStorage(MA->getBase(), MB->getBase());
  }
  return isa<CXXThisExpr>(A) && isa<CXXThisExpr>(B);
}

static bool matchesName(const NamedDecl &D,
                        const std::vector<std::string> &Names) {
  if (!D.getIdentifier())
    return false;
  std::string Q = D.getQualifiedNameAsString();
  for (StringRef N : Names) {
    if (N.contains("::")) {
      N.consume_front("::");
      if (N == Q)
        return true;
    } else if (N == D.getName()) {
      return true;
    }
  }
  return false;
}

bool LossAccumulationGraphCheck::matchAccumulation(const Stmt &S,
                                                   Accumulation &Out) const {
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&S)) {
    if (Op->getNumArgs() != 2 || !isTensorType(Op->getArg(0)->getType()))
      return false;
    if (Op->getOperator() == OO_PlusEqual) {
      Out = {Accumulation::Add, Op->getArg(0), Op->getArg(1), "+="};
      return isTensorType(Out.Value->getType());
    }
    if (Op->getOperator() != OO_Equal)
      return false;
    const auto *Sum =
        dyn_cast<CXXOperatorCallExpr>(stripConversions(Op->getArg(1)));
    if (!Sum || Sum->getOperator() != OO_Plus || Sum->getNumArgs() != 2)
      return false;
    const Expr *Acc = Op->getArg(0);
    if (sameStorage(Acc, Sum->getArg(0)))
      Out = {Accumulation::Add, Acc, Sum->getArg(1), "+"};
    else if (sameStorage(Acc, Sum->getArg(1)))
      Out = {Accumulation::Add, Acc, Sum->getArg(0), "+"};
    else
      return false;
    return isTensorType(Out.Value->getType());
  }
  const auto *Call = dyn_cast<CXXMemberCallExpr>(&S);
  if (!Call || !Call->getMethodDecl() ||
      !Call->getMethodDecl()->getIdentifier())
    return false;
  const Expr *Obj = Call->getImplicitObjectArgument();
  if (!Obj)
    return false;
  StringRef Name = Call->getMethodDecl()->getName();
  if (isTensorType(Obj->getType())) {
    if (Name != "add_" || Call->getNumArgs() < 1)
      return false;
    Out = {Accumulation::Add, Obj, Call->getArg(0), "add_"};
    return isTensorType(Out.Value->getType());
  }
  bool Append = (Name == "push_back" || Name == "emplace_back") &&
                carriesTensor(Obj->getType());
  bool Custom =
      !Append && matchesName(*Call->getMethodDecl(), AccumulatingFunctions);
  if (!Append && !Custom)
    return false;
  for (const Expr *Arg : Call->arguments())
    if (isTensorType(Arg->getType())) {
      Out = {Append ? Accumulation::Append : Accumulation::Store, Obj, Arg,
             Name};
      return Append ? Call->getNumArgs() == 1 : true;
    }
  return false;
}

namespace {

/// The declaration an accumulator expression names, for "mentions".
struct AccKey {
  const ValueDecl *Decl = nullptr;
  bool IsField = false;
};

/// True when \p S refers to \p Key anywhere (through `this->` for fields).
bool mentions(const Stmt *S, const AccKey &Key) {
  if (!S)
    return false;
  if (const auto *Ref = dyn_cast<DeclRefExpr>(S))
    if (Ref->getDecl() == Key.Decl)
      return true;
  if (const auto *ME = dyn_cast<MemberExpr>(S))
    if (ME->getMemberDecl() == Key.Decl)
      return true;
  for (const Stmt *Child : S->children())
    if (mentions(Child, Key))
      return true;
  return false;
}

/// Calls that mention the accumulator and run backward through it:
/// `total.backward()`, `torch::stack(losses).sum().backward()`,
/// `step(total)` where `step`, defined in the TU, calls backward, or a
/// function named in BackwardFunctions.
class BackwardThroughFinder
    : public RecursiveASTVisitor<BackwardThroughFinder> {
public:
  BackwardThroughFinder(const AccKey &Key, ASTContext &Ctx,
                        const TrainingLoopOptions &Opts)
      : Key(Key), Ctx(Ctx), Opts(Opts) {}
  bool shouldVisitLambdaBody() const { return true; }
  bool VisitCallExpr(CallExpr *Call) {
    if (!mentions(Call, Key))
      return true;
    if (isBackwardCall(*Call, Opts) ||
        findBackwardCall(*Call, Ctx, Opts, /*IncludeStep=*/false)) {
      Found = true;
      return false;
    }
    return true;
  }
  bool Found = false;

private:
  const AccKey &Key;
  ASTContext &Ctx;
  const TrainingLoopOptions &Opts;
};

/// `return` statements (outside nested lambdas) that hand the accumulator,
/// or a tensor computed from it, to the caller.
class ReturnFinder : public RecursiveASTVisitor<ReturnFinder> {
public:
  explicit ReturnFinder(const AccKey &Key) : Key(Key) {}
  bool TraverseLambdaExpr(LambdaExpr *) { return true; }
  bool VisitReturnStmt(ReturnStmt *RS) {
    const Expr *V = RS->getRetValue();
    if (V && carriesTensor(V->getType()) && mentions(V, Key)) {
      Found = true;
      return false;
    }
    return true;
  }
  bool Found = false;

private:
  const AccKey &Key;
};

const char *const ResettingMethods[] = {
    "clear",     "detach_", "swap",   "erase", "pop_back",
    "pop_front", "resize",  "assign", "reset", "set_data"};

/// Resets of the accumulator inside the loop: afterwards the previous
/// iterations' graphs are unreachable, so memory does not grow.
class ResetFinder : public RecursiveASTVisitor<ResetFinder> {
public:
  ResetFinder(const AccKey &Key, const Stmt &Accumulation)
      : Key(Key), Accumulation(Accumulation) {}
  bool shouldVisitLambdaBody() const { return true; }

  bool VisitBinaryOperator(BinaryOperator *BO) {
    if (BO->getOpcode() == BO_Assign && isAcc(BO->getLHS()) &&
        resetsWith(BO->getRHS()))
      Found = true;
    return !Found;
  }
  bool VisitCallExpr(CallExpr *Call) {
    if (Call == &Accumulation)
      return true;
    const auto *FD = Call->getDirectCallee();
    if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Call)) {
      if (Op->getOperator() == OO_Equal && Op->getNumArgs() == 2 &&
          isAcc(Op->getArg(0)) && resetsWith(Op->getArg(1)))
        Found = true;
      return !Found;
    }
    if (const auto *Member = dyn_cast<CXXMemberCallExpr>(Call)) {
      const auto *MD = Member->getMethodDecl();
      if (MD && MD->getIdentifier() &&
          isAcc(Member->getImplicitObjectArgument()))
        for (const char *Name : ResettingMethods)
          if (MD->getName() == Name)
            Found = true;
    }
    // Passed by non-const reference (std::swap, a reset helper) or moved.
    if (FD && FD->getQualifiedNameAsString() == "std::move" &&
        Call->getNumArgs() == 1 && isAcc(Call->getArg(0)))
      Found = true;
    if (FD && !isa<CXXMemberCallExpr>(Call))
      for (unsigned I = 0; I < Call->getNumArgs() && I < FD->getNumParams();
           ++I) {
        QualType PT = FD->getParamDecl(I)->getType();
        if ((PT->isReferenceType() || PT->isPointerType()) &&
            !PT->getPointeeType().isConstQualified()) {
          const Expr *Arg = Call->getArg(I)->IgnoreParenImpCasts();
          if (const auto *UO = dyn_cast<UnaryOperator>(Arg);
              UO && UO->getOpcode() == UO_AddrOf)
            Arg = UO->getSubExpr();
          if (isAcc(Arg))
            Found = true;
        }
      }
    return !Found;
  }
  bool Found = false;

private:
  bool isAcc(const Expr *E) const {
    if (!E)
      return false;
    E = E->IgnoreParenImpCasts();
    if (const auto *Ref = dyn_cast<DeclRefExpr>(E))
      return Ref->getDecl() == Key.Decl;
    if (const auto *ME = dyn_cast<MemberExpr>(E))
      return ME->getMemberDecl() == Key.Decl;
    return false;
  }
  /// `acc = E` starts afresh unless E is built from acc (and not detached).
  bool resetsWith(const Expr *RHS) const {
    return !mentions(RHS, Key) || callsDetach(RHS);
  }
  static bool callsDetach(const Stmt *S) {
    if (const auto *Call = dyn_cast<CXXMemberCallExpr>(S))
      if (const auto *MD = Call->getMethodDecl())
        if (MD->getIdentifier() &&
            (MD->getName() == "detach" || MD->getName() == "item"))
          return true;
    for (const Stmt *Child : S->children())
      if (Child && callsDetach(Child))
        return true;
    return false;
  }
  const AccKey &Key;
  const Stmt &Accumulation;
};

/// How a warning names an expression: its source text when short.
std::string sourceText(const Expr *E, const ASTContext &Ctx) {
  E = E->IgnoreParenImpCasts();
  StringRef Text =
      Lexer::getSourceText(CharSourceRange::getTokenRange(E->getSourceRange()),
                           Ctx.getSourceManager(), Ctx.getLangOpts());
  if (Text.empty() || Text.size() > 40 || Text.contains('\n'))
    return "";
  return Text.str();
}

/// Whether `E.detach()` parses as intended without parentheses.
bool isPostfixOperand(const Expr *E) {
  E = E->IgnoreImplicit();
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E))
    return Op->getOperator() == OO_Subscript || Op->getOperator() == OO_Call ||
           Op->getOperator() == OO_Arrow;
  return isa<DeclRefExpr, MemberExpr, CallExpr, ParenExpr, ArraySubscriptExpr>(
      E);
}

/// Finds the accumulation shapes without running the analysis.
class CandidateFinder : public RecursiveASTVisitor<CandidateFinder> {
public:
  explicit CandidateFinder(const LossAccumulationGraphCheck &Check)
      : Check(Check) {}
  bool TraverseLambdaExpr(LambdaExpr *) { return true; }
  bool VisitCallExpr(CallExpr *Call) {
    LossAccumulationGraphCheck::Accumulation A;
    Found = Check.matchAccumulation(*Call, A);
    return !Found;
  }
  bool Found = false;

private:
  const LossAccumulationGraphCheck &Check;
};

} // namespace

void LossAccumulationGraphCheck::check(const MatchFinder::MatchResult &Result) {
  std::optional<AnalyzedBody> Body = getAnalyzedBody(Result);
  if (!Body)
    return;
  {
    CandidateFinder Finder(*this);
    Finder.TraverseStmt(const_cast<Stmt *>(Body->Body));
    if (!Finder.Found)
      return;
  }
  ASTContext &Ctx = *Result.Context;
  std::unique_ptr<TensorFlowAnalysis> Analysis =
      TensorFlowAnalysis::run(*Body->Function, *Body->Body, Ctx, ApiOptions);
  if (!Analysis || !Analysis->converged())
    return;
  const TensorModel &Model = Analysis->model();

  struct Finding {
    const Stmt *At;
    Accumulation A;
    SourceLocation GraphOrigin;
  };
  llvm::SmallVector<Finding, 4> Findings;
  Analysis->replay([&](const Stmt &S, const TensorState &State) {
    Accumulation A;
    if (!matchAccumulation(S, A))
      return;
    ValueFacts Facts = Model.evaluate(A.Value, State);
    if (Facts.Graph.Value == GraphState::InGraph)
      Findings.push_back({&S, A, Facts.Graph.Origin});
  });

  for (const Finding &F : Findings) {
    const Stmt &At = *F.At;
    if (At.getBeginLoc().isMacroID())
      continue;
    EnclosingLoop Enclosing = findEnclosingLoop(At, Ctx);
    if (!Enclosing.Loop)
      continue;
    const Stmt &Loop = *Enclosing.Loop;
    StorageRoot Root = classifyStorage(F.A.Acc, Loop, Ctx);
    if (Root.Kind == LoopStorage::PerIteration || !Root.Decl)
      continue;
    const auto *VD = dyn_cast<VarDecl>(Root.Decl);
    // A reference or pointer declared in the loop may name per-iteration
    // storage.
    if (VD &&
        (VD->getType()->isReferenceType() || VD->getType()->isPointerType()) &&
        !isa<ParmVarDecl>(VD)) {
      const SourceManager &SM = Ctx.getSourceManager();
      SourceLocation L = SM.getExpansionLoc(VD->getLocation());
      if (!SM.isBeforeInTranslationUnit(L,
                                        SM.getExpansionLoc(Loop.getBeginLoc())))
        continue;
    }
    AccKey Key{Root.Decl, Root.Kind == LoopStorage::Member};

    // Autograd must record where the value is accumulated: a guard in an
    // enclosing lambda's scope or in every caller makes the sum graph-free.
    if (!Oracle || OracleContext != &Ctx) {
      Oracle = std::make_unique<GradModeOracle>(Ctx, GuardTypes);
      OracleContext = &Ctx;
    }
    if (Oracle->at(At) != GradModeAt::Enabled)
      continue;

    // A reset in the loop drops the earlier iterations' graphs.
    ResetFinder Resets(Key, At);
    Resets.TraverseStmt(const_cast<Stmt *>(&Loop));
    if (Resets.Found)
      continue;

    // A backward through the accumulator is what keeping the graph is for.
    const Stmt *FunctionBody = enclosingFunctionBody(At, Ctx);
    if (!FunctionBody)
      continue;
    BackwardThroughFinder Backward(Key, Ctx, LoopOptions);
    if (Key.IsField || (VD && !VD->hasLocalStorage()))
      Backward.TraverseDecl(Ctx.getTranslationUnitDecl());
    else
      Backward.TraverseStmt(const_cast<Stmt *>(FunctionBody));
    if (Backward.Found)
      continue;
    bool TrainingLoop = loopCallsBackwardOrStep(Loop, Ctx, LoopOptions);
    if (!TrainingLoop) {
      // Outside a training loop, an accumulator that leaves the function
      // may meet a backward in the caller.
      if (VD && isa<ParmVarDecl>(VD))
        continue;
      ReturnFinder Returns(Key);
      Returns.TraverseStmt(const_cast<Stmt *>(FunctionBody));
      if (Returns.Found)
        continue;
    }

    std::string Value = sourceText(F.A.Value, Ctx);
    std::string AccText = sourceText(F.A.Acc, Ctx);
    std::string Where;
    if (Root.Kind == LoopStorage::Member)
      Where = "member '" + Root.Decl->getNameAsString() + "'";
    else if (VD && isa<ParmVarDecl>(VD))
      Where = "parameter '" +
              (AccText.empty() ? VD->getNameAsString() : AccText) + "'";
    else
      Where = "'" + (AccText.empty() ? Root.Decl->getNameAsString() : AccText) +
              "', declared outside the loop";
    std::string What = Value.empty() ? "the value" : "'" + Value + "'";
    std::string Verb = F.A.Kind == Accumulation::Add      ? "accumulated into"
                       : F.A.Kind == Accumulation::Append ? "appended to"
                                                          : "stored into";
    {
      auto Diag = diag(At.getBeginLoc(),
                       "%0 is still attached to its autograd graph and is %1 "
                       "%2; every iteration's graph stays alive and memory "
                       "grows with each step")
                  << What << Verb << Where;
      const Expr *V = F.A.Value->IgnoreImplicit();
      SourceRange VR = V->getSourceRange();
      if (VR.isValid() && !VR.getBegin().isMacroID() &&
          !VR.getEnd().isMacroID()) {
        if (isPostfixOperand(V)) {
          Diag << FixItHint::CreateInsertion(
              Lexer::getLocForEndOfToken(VR.getEnd(), 0, Ctx.getSourceManager(),
                                         Ctx.getLangOpts()),
              ".detach()");
        } else {
          Diag << FixItHint::CreateInsertion(VR.getBegin(), "(")
               << FixItHint::CreateInsertion(
                      Lexer::getLocForEndOfToken(VR.getEnd(), 0,
                                                 Ctx.getSourceManager(),
                                                 Ctx.getLangOpts()),
                      ").detach()");
        }
      }
    } // the warning is emitted here, before its note
    if (F.GraphOrigin.isValid() && !F.GraphOrigin.isMacroID())
      diag(F.GraphOrigin, "%0 joins the autograd graph here",
           DiagnosticIDs::Note)
          << What;
  }
}

} // namespace clang::tidy::torch
