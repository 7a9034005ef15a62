//===--- LossAccumulation.cpp - torch-tidy --------------------------------===//

#include "LossAccumulation.h"
#include "ProgramModel.h"
#include "TensorFlowAnalysis.h"
#include "model/GradMode.h"
#include "api/TorchMatchers.h"
#include "model/UserCodeParents.h"
#include "model/UserCodeTraversal.h"
#include "clang/AST/RecursiveASTVisitor.h"

namespace clang::tidy::torch {

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


bool matchAccumulation(const Stmt &S,
                       const std::vector<std::string> &AccumulatingFunctions,
                       Accumulation &Out) {
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
      !Append && matchesNameList(*Call->getMethodDecl(), AccumulatingFunctions);
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
/// `step(total)` where `step`'s summary runs backward, or a function named
/// in BackwardFunctions.
class BackwardThroughFinder
    : public RecursiveASTVisitor<BackwardThroughFinder> {
public:
  BackwardThroughFinder(const AccKey &Key, ProgramModel &Program)
      : Key(Key), Program(Program) {}
  bool shouldVisitTemplateInstantiations() const { return true; }
  bool shouldVisitLambdaBody() const { return true; }
  bool VisitCallExpr(CallExpr *Call) {
    if (!mentions(Call, Key))
      return true;
    if (callTrains(*Call, Program, TrainingCall::Backward) ||
        findTrainingCall(*Call, Program, TrainingCall::Backward)) {
      Found = true;
      return false;
    }
    return true;
  }
  bool Found = false;

private:
  const AccKey &Key;
  ProgramModel &Program;
};

/// The variables whose values are computed from the accumulator in a
/// function body: `loss = lbox + lobj + lcls` after `lobj += ...`.
class DerivedValues : public RecursiveASTVisitor<DerivedValues> {
public:
  explicit DerivedValues(const AccKey &Key) { Keys.push_back(Key); }
  bool TraverseLambdaExpr(LambdaExpr *) { return true; }
  bool VisitVarDecl(VarDecl *VD) {
    if (VD->getInit())
      flow(VD, VD->getInit());
    return true;
  }
  bool VisitCallExpr(CallExpr *Call) {
    Accumulation A;
    if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Call);
        Op && Op->isAssignmentOp() && Op->getNumArgs() == 2)
      flowInto(Op->getArg(0), Op->getArg(1));
    else if (matchAccumulation(*Call, {}, A))
      flowInto(A.Acc, A.Value);
    return true;
  }
  bool VisitBinaryOperator(BinaryOperator *BO) {
    if (BO->isAssignmentOp())
      flowInto(BO->getLHS(), BO->getRHS());
    return true;
  }
  /// Grows the set until it is stable.
  void run(Stmt &Body) {
    size_t Before;
    do {
      Before = Keys.size();
      TraverseStmt(&Body);
    } while (Keys.size() != Before);
  }
  bool mentionedIn(const Stmt *S) const {
    return llvm::any_of(Keys, [&](const AccKey &K) { return mentions(S, K); });
  }

private:
  void flowInto(const Expr *Target, const Expr *Value) {
    Target = Target->IgnoreParenImpCasts();
    if (const auto *Ref = dyn_cast<DeclRefExpr>(Target))
      flow(Ref->getDecl(), Value);
    else if (const auto *ME = dyn_cast<MemberExpr>(Target))
      flow(ME->getMemberDecl(), Value);
  }
  void flow(const ValueDecl *To, const Expr *Value) {
    if (!carriesTensor(To->getType()) || !mentionedIn(Value) ||
        llvm::any_of(Keys, [&](const AccKey &K) { return K.Decl == To; }))
      return;
    Keys.push_back({To, isa<FieldDecl>(To)});
  }
  llvm::SmallVector<AccKey, 4> Keys;
};

/// `return` statements (outside nested lambdas) that hand the accumulator,
/// or a value computed from it, to the caller: directly, in a braced list,
/// a tuple, a struct, `std::make_tuple(...)`.
class ReturnFinder : public RecursiveASTVisitor<ReturnFinder> {
public:
  explicit ReturnFinder(const DerivedValues &Values) : Values(Values) {}
  bool TraverseLambdaExpr(LambdaExpr *) { return true; }
  bool VisitReturnStmt(ReturnStmt *RS) {
    const Expr *V = RS->getRetValue();
    if (V && carriesTensor(V->getType()) && Values.mentionedIn(V)) {
      Found = true;
      return false;
    }
    return true;
  }
  bool Found = false;

private:
  const DerivedValues &Values;
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

} // namespace

std::vector<GraphAccumulation>
findGraphAccumulations(const TensorFlowAnalysis &Analysis,
                       ProgramModel &Program, GradModeOracle &GradMode,
                       const std::vector<std::string> &AccumulatingFunctions) {
  std::vector<GraphAccumulation> Candidates;
  const TensorModel &Model = Analysis.model();
  Analysis.replay([&](const Stmt &S, const TensorState &State) {
    Accumulation A;
    if (!matchAccumulation(S, AccumulatingFunctions, A))
      return;
    ValueFacts Facts = Model.evaluate(A.Value, State);
    if (Facts.Graph.Value == GraphState::InGraph)
      Candidates.push_back({&S, A, Facts.Graph, {}});
  });

  ASTContext &Ctx = Program.context();
  std::vector<GraphAccumulation> Found;
  for (GraphAccumulation &F : Candidates) {
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
    if (GradMode.at(At) != GradModeAt::Enabled)
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
    BackwardThroughFinder Backward(Key, Program);
    if (Key.IsField || (VD && !VD->hasLocalStorage())) {
      for (Decl *D : UserCodeTraversal::userDeclarations(Ctx))
        if (!Backward.Found)
          Backward.TraverseDecl(D);
    } else {
      Backward.TraverseStmt(const_cast<Stmt *>(FunctionBody));
    }
    if (Backward.Found)
      continue;
    if (!loopCallsBackwardOrStep(Loop, Program)) {
      // Outside a training loop, an accumulator that leaves the function
      // may meet a backward in the caller.
      if (VD && isa<ParmVarDecl>(VD))
        continue;
      DerivedValues Values(Key);
      Values.run(*const_cast<Stmt *>(FunctionBody));
      ReturnFinder Returns(Values);
      Returns.TraverseStmt(const_cast<Stmt *>(FunctionBody));
      if (Returns.Found)
        continue;
    }
    F.Root = Root;
    Found.push_back(F);
  }
  return Found;
}

} // namespace clang::tidy::torch
