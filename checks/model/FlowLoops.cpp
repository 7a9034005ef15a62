//===--- FlowLoops.cpp - torch-tidy ---------------------------------------===//
//
// The loop structure of one analysed body: dominators over the CFG (with
// the exception edges), natural loops and which of them train, where a
// statement runs relative to them, and whether it runs on every call.
//
//===----------------------------------------------------------------------===//

#include "FlowAnalysis.h"
#include "ProgramModel.h"
#include "api/StdLibrary.h"
#include "clang/AST/StmtCXX.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

//===--- Loops -------------------------------------------------------------===//

namespace {
/// Adds every sub-statement of \p S (not entering lambdas) to \p Out.
void mapStatements(const Stmt *S, const CFGBlock *Block,
                   llvm::DenseMap<const Stmt *, const CFGBlock *> &Out) {
  if (!S)
    return;
  Out.try_emplace(S, Block);
  if (isa<LambdaExpr>(S))
    return;
  for (const Stmt *Child : S->children())
    mapStatements(Child, Block, Out);
}

} // namespace

/// By its form alone: a range-for over a fixed-size non-empty range
/// (`std::array<T, 2>`, a built-in array, a braced list) or a counting loop
/// from a constant to a constant past it (`for (int h = 0; h < 2; ++h)`).
bool runsAtLeastOnce(const Stmt *S, const ASTContext &Ctx) {
  if (const auto *RangeFor = dyn_cast_or_null<CXXForRangeStmt>(S)) {
    const Expr *Range = RangeFor->getRangeInit()->IgnoreImplicit();
    if (const auto *List = dyn_cast<CXXStdInitializerListExpr>(Range))
      if (const auto *Init = dyn_cast<InitListExpr>(
              List->getSubExpr()->IgnoreImplicit()))
        return Init->getNumInits() > 0;
    QualType T = Range->getType().getNonReferenceType().getCanonicalType();
    if (const auto *Array = Ctx.getAsConstantArrayType(T))
      return Array->getSize().getZExtValue() > 0;
    const auto *Spec = dyn_cast_or_null<ClassTemplateSpecializationDecl>(
        T->getAsCXXRecordDecl());
    if (Spec && isStdClass(Spec, "array") &&
        Spec->getTemplateArgs().size() == 2 &&
        Spec->getTemplateArgs()[1].getKind() == TemplateArgument::Integral)
      return Spec->getTemplateArgs()[1].getAsIntegral().getZExtValue() > 0;
    return false;
  }
  const auto *For = dyn_cast_or_null<ForStmt>(S);
  const auto *Init = For ? dyn_cast_or_null<DeclStmt>(For->getInit()) : nullptr;
  const auto *Var = Init && Init->isSingleDecl()
                        ? dyn_cast<VarDecl>(Init->getSingleDecl())
                        : nullptr;
  const auto *Cond =
      For ? dyn_cast_or_null<BinaryOperator>(For->getCond()) : nullptr;
  if (!Var || !Var->getInit() || !Cond || !Cond->isComparisonOp())
    return false;
  const auto *Counter =
      dyn_cast<DeclRefExpr>(Cond->getLHS()->IgnoreParenImpCasts());
  Expr::EvalResult First, Bound;
  if (!Counter || Counter->getDecl() != Var ||
      !Var->getInit()->EvaluateAsInt(First, Ctx) ||
      !Cond->getRHS()->EvaluateAsInt(Bound, Ctx))
    return false;
  const llvm::APSInt &A = First.Val.getInt(), &B = Bound.Val.getInt();
  switch (Cond->getOpcode()) {
  case BO_LT: return llvm::APSInt::compareValues(A, B) < 0;
  case BO_LE: return llvm::APSInt::compareValues(A, B) <= 0;
  case BO_GT: return llvm::APSInt::compareValues(A, B) > 0;
  case BO_GE: return llvm::APSInt::compareValues(A, B) >= 0;
  case BO_NE: return llvm::APSInt::compareValues(A, B) != 0;
  default: return false;
  }
}

const CFGBlock *FlowAnalysis::blockOf(const Stmt &S) const {
  if (BlockOfStmt.empty()) {
    auto &Map = const_cast<llvm::DenseMap<const Stmt *, const CFGBlock *> &>(
        BlockOfStmt);
    // Elements first, so that a statement that is an element of its own is
    // mapped to its own block, not to its parent's.
    for (const CFGBlock *Block : ReversePostOrder)
      for (const CFGElement &El : *Block)
        if (auto CS = El.getAs<CFGStmt>())
          Map.try_emplace(CS->getStmt(), Block);
    for (const CFGBlock *Block : ReversePostOrder)
      for (const CFGElement &El : *Block) {
        if (auto CS = El.getAs<CFGStmt>())
          for (const Stmt *Child : CS->getStmt()->children())
            if (Child && !Elements.contains(Child) && !isa<LambdaExpr>(CS->getStmt()))
              mapStatements(Child, Block, Map);
        if (auto Init = El.getAs<CFGInitializer>())
          mapStatements(Init->getInitializer()->getInit(), Block, Map);
      }
  }
  return BlockOfStmt.lookup(&S);
}

bool FlowAnalysis::dominates(const CFGBlock &A, const CFGBlock &B) const {
  computeLoops();
  const llvm::BitVector &D = Dominators[B.getBlockID()];
  return !D.empty() && D.test(A.getBlockID());
}

bool FlowAnalysis::runsWithTraining(const Loop &L,
                                    const CFGBlock &Inner) const {
  const CFGBlock *Train = L.TrainingCall ? blockOf(*L.TrainingCall) : nullptr;
  if (!Train)
    return false;
  if (dominates(Inner, *Train))
    return true;
  // Every path from the training call back to the loop's head passes it.
  llvm::BitVector Seen(Graph->getNumBlockIDs());
  llvm::SmallVector<const CFGBlock *, 8> Work{Train};
  Seen.set(Train->getBlockID());
  while (!Work.empty()) {
    const CFGBlock *B = Work.pop_back_val();
    if (B == &Inner)
      continue;
    if (llvm::is_contained(L.Latches, B))
      return false;
    for (const CFGBlock *Next : B->succs())
      if (Next && L.Blocks.test(Next->getBlockID()) &&
          !Seen.test(Next->getBlockID())) {
        Seen.set(Next->getBlockID());
        Work.push_back(Next);
      }
  }
  return true;
}

/// Calls \p F on every sub-statement of \p S, lambda bodies included.
static void forEachCall(const Stmt *S,
                        llvm::function_ref<void(const CallExpr &)> F) {
  if (!S)
    return;
  if (const auto *Call = dyn_cast<CallExpr>(S))
    F(*Call);
  if (const auto *Lambda = dyn_cast<LambdaExpr>(S)) {
    // A generic lambda runs its instantiations, not its pattern.
    const CXXMethodDecl *Op = Lambda->getCallOperator();
    if (const FunctionTemplateDecl *T = Op->getDescribedFunctionTemplate()) {
      for (const FunctionDecl *Body : T->specializations())
        forEachCall(Body->getBody(), F);
      return;
    }
    forEachCall(Lambda->getBody(), F);
    return;
  }
  for (const Stmt *Child : S->children())
    forEachCall(Child, F);
}

void FlowAnalysis::computeLoops() const {
  if (LoopsComputed)
    return;
  LoopsComputed = true;
  unsigned N = Graph->getNumBlockIDs();
  // Dominators: the blocks every path from the entry passes.
  Dominators.assign(N, llvm::BitVector());
  for (const CFGBlock *B : ReversePostOrder) {
    Dominators[B->getBlockID()] = llvm::BitVector(N, true);
  }
  Dominators[Graph->getEntry().getBlockID()] = llvm::BitVector(N, false);
  Dominators[Graph->getEntry().getBlockID()].set(Graph->getEntry().getBlockID());
  for (bool Changed = true; Changed;) {
    Changed = false;
    for (const CFGBlock *B : ReversePostOrder) {
      if (B == &Graph->getEntry())
        continue;
      llvm::BitVector D(N, true);
      bool AnyPred = false;
      auto Meet = [&](const CFGBlock *P) {
        if (!P || Dominators[P->getBlockID()].empty())
          return;
        D &= Dominators[P->getBlockID()];
        AnyPred = true;
      };
      for (const CFGBlock::AdjacentBlock &Pred : B->preds())
        Meet(Pred.getReachableBlock());
      for (const CFGBlock *P : ThrownFrom[B->getBlockID()])
        Meet(P);
      if (!AnyPred)
        D.reset();
      D.set(B->getBlockID());
      if (D != Dominators[B->getBlockID()]) {
        Dominators[B->getBlockID()] = std::move(D);
        Changed = true;
      }
    }
  }
  // Natural loops: a back edge goes to a block that dominates its source.
  llvm::DenseMap<const CFGBlock *, unsigned> ByHeader;
  for (const CFGBlock *B : ReversePostOrder)
    for (const CFGBlock::AdjacentBlock &Succ : B->succs()) {
      const CFGBlock *H = Succ.getReachableBlock();
      if (!H || Dominators[B->getBlockID()].empty() ||
          !Dominators[B->getBlockID()].test(H->getBlockID()))
        continue;
      auto [It, New] = ByHeader.try_emplace(H, Loops.size());
      if (New) {
        Loops.push_back({});
        Loops.back().Header = H;
        Loops.back().Blocks = llvm::BitVector(N, false);
        Loops.back().Blocks.set(H->getBlockID());
      }
      Loop &L = Loops[It->second];
      L.Latches.push_back(B);
      // Every block that reaches the latch without passing the header.
      llvm::SmallVector<const CFGBlock *, 16> Work{B};
      while (!Work.empty()) {
        const CFGBlock *X = Work.pop_back_val();
        if (L.Blocks.test(X->getBlockID()))
          continue;
        L.Blocks.set(X->getBlockID());
        for (const CFGBlock::AdjacentBlock &Pred : X->preds())
          if (const CFGBlock *P = Pred.getReachableBlock())
            Work.push_back(P);
        llvm::append_range(Work, ThrownFrom[X->getBlockID()]);
      }
      if (!L.Statement)
        L.Statement = B->getLoopTarget();
    }
  for (Loop &L : Loops) {
    if (!L.Statement)
      L.Statement = L.Header->getTerminatorStmt();
    // `do { ... } while (false)` has no back edge: it is no loop here.
    // The training calls of the loop's own blocks, not of nested loops'.
    bool MayTrain = false;
    for (const CFGBlock *B : ReversePostOrder) {
      if (!L.Blocks.test(B->getBlockID()))
        continue;
      bool Nested = llvm::any_of(Loops, [&](const Loop &Inner) {
        return &Inner != &L && Inner.Header != L.Header &&
               L.Blocks.test(Inner.Header->getBlockID()) &&
               Inner.Blocks.test(B->getBlockID()) &&
               Inner.Blocks.count() < L.Blocks.count();
      });
      for (const CFGElement &El : *B) {
        auto CS = El.getAs<CFGStmt>();
        if (!CS)
          continue;
        forEachCall(CS->getStmt(), [&](const CallExpr &Call) {
          // A callable runs what it holds where it is called.
          std::optional<State> Before;
          if (callableHolder(Call))
            Before = stateBefore(Call);
          if (!Nested && !L.TrainingCall &&
              (Before ? Model.callTrains(Call, TrainingCall::PerStep, *Before)
                      : Program.callTrains(Call, TrainingCall::PerStep)))
            L.TrainingCall = &Call;
          MayTrain |= Before ? Model.mayTrain(Call, *Before)
                             : Program.mayTrain(Call);
        });
        // A statement clang could not compile may have held any call.
        if (const auto *E = dyn_cast<Expr>(CS->getStmt());
            E && E->containsErrors())
          MayTrain = true;
      }
    }
    L.WithoutBackward = !MayTrain;
  }
}

LoopContext FlowAnalysis::loopContext(const Stmt &S) const {
  LoopContext C;
  const CFGBlock *Block = blockOf(S);
  if (!Block)
    return C;
  computeLoops();
  // Innermost first: the loop with the fewest blocks.
  llvm::SmallVector<const Loop *, 2> Around;
  for (const Loop &L : Loops)
    if (L.Blocks.test(Block->getBlockID()))
      Around.push_back(&L);
  llvm::sort(Around, [](const Loop *A, const Loop *B) {
    return A->Blocks.count() < B->Blocks.count();
  });
  if (!Around.empty()) {
    C.Loop = Around.front()->Statement ? Around.front()->Statement->getBeginLoc()
                                       : SourceLocation();
    // An inner loop of a training step that feeds the backward() its
    // enclosing loop runs after it (decoding steps, micro-batches) runs
    // forwards whose graphs that backward reaches: the program knows which
    // (graphsBackpropagated); a validation loop inside the epoch loop is
    // still a loop without backward.
    C.LoopWithoutBackward = Around.front()->WithoutBackward;
  }
  // The training loop that repeats it on every iteration: the statement
  // runs on every iteration of the innermost loop, whose header runs on
  // every iteration of the next one out, and so on, up to MaxLoopDepth.
  const CFGBlock *Inner = Block;
  unsigned Depth = 0;
  for (const Loop *L : Around) {
    // A range-for over callbacks (or a registry's entries) runs each of
    // them once: not a repetition.
    const auto *RangeFor = dyn_cast_or_null<CXXForRangeStmt>(L->Statement);
    bool OverCallables =
        RangeFor && holdsCallable(RangeFor->getLoopVariable()->getType());
    if (!OverCallables && Depth >= Program.options().MaxLoopDepth)
      break;
    // On every iteration, or on every one that trains (an iteration that
    // `continue`s before its step, in a warm-up, is no training step).
    bool EveryIteration = llvm::all_of(L->Latches, [&](const CFGBlock *Latch) {
      return dominates(*Inner, *Latch);
    });
    if (!EveryIteration && !runsWithTraining(*L, *Inner))
      break; // conditional in this loop: not every iteration of outer ones
    if (L->TrainingCall) {
      C.TrainingLoop = L->Statement ? L->Statement->getBeginLoc()
                                    : L->TrainingCall->getBeginLoc();
      C.TrainingCall = L->TrainingCall->getBeginLoc();
      if (const auto *Member = dyn_cast<MemberExpr>(
              cast<CallExpr>(L->TrainingCall)->getCallee()->IgnoreImpCasts()))
        C.TrainingCall = Member->getMemberLoc();
      if (const FunctionDecl *FD =
              cast<CallExpr>(L->TrainingCall)->getDirectCallee())
        C.TrainingCallee = Program.intern(FD->getNameAsString() + "()");
      break;
    }
    Inner = L->Header;
    // A loop sure to run its body runs it on each iteration of the next one
    // out: what it repeats, that loop repeats too (not a level of depth).
    if (!OverCallables && !runsAtLeastOnce(L->Statement, Program.context()))
      ++Depth;
  }
  C.EveryCall = Around.empty() && runsOnEveryCall(S);
  return C;
}

std::pair<int64_t, const Expr *> FlowAnalysis::largestCountProven() const {
  std::pair<int64_t, const Expr *> Best{0, nullptr};
  // Comparisons against a constant; one against a value only guards what it
  // controls.
  for (const std::optional<State> &In : BlockEntry)
    if (In && In->path().CountAtLeast > Best.first &&
        In->path().CountAtLeast != EveryDevice)
      Best = {In->path().CountAtLeast, In->path().CountProof};
  return Best;
}

llvm::SmallVector<std::pair<const Stmt *, SourceLocation>, 2>
FlowAnalysis::leftForLaterIteration(
    const Stmt &Site,
    llvm::ArrayRef<std::pair<const Stmt *, SourceLocation>> Left) const {
  llvm::SmallVector<std::pair<const Stmt *, SourceLocation>, 2> Out;
  if (Function && Program.entryContext(*Function).Loop.Loop.isValid()) {
    Out.assign(Left.begin(), Left.end());
    return Out;
  }
  const CFGBlock *SiteBlock = blockOf(Site);
  if (!SiteBlock)
    return Out;
  computeLoops();
  for (const auto &Entry : Left)
    if (const CFGBlock *Block = blockOf(*Entry.first))
      if (llvm::any_of(Loops, [&](const Loop &L) {
            return L.Blocks.test(Block->getBlockID()) &&
                   L.Blocks.test(SiteBlock->getBlockID());
          }))
        Out.push_back(Entry);
  return Out;
}

bool FlowAnalysis::runsOnEveryCall(const Stmt &S) const {
  const CFGBlock *Block = blockOf(S);
  return Block && exitState() && dominates(*Block, Graph->getExit());
}

} // namespace clang::tidy::torch
