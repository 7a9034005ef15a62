//===--- FlowEdges.cpp - torch-tidy ---------------------------------------===//
//
// What an edge of the CFG proves on its way to the next block: the branch
// condition that it takes (each operand of an if's `a && b` on its true
// edge), the elements a range-for leaves as it exits, and what the
// condition proves of the values it tests (FlowModel::refineOnBranch).
//
//===----------------------------------------------------------------------===//

#include "FlowAnalysis.h"
#include "api/Devices.h"
#include "api/TorchMatchers.h"
#include "support/UserCodeParents.h"
#include "clang/AST/Expr.h"
#include "clang/AST/StmtCXX.h"
#include "llvm/ADT/BitVector.h"

namespace clang::tidy::torch {

/// The rightmost operand of `a && b` / `a || b`: the blocks of the operands
/// before it decided theirs.
static const Expr *rightmostOperand(const Expr *Cond) {
  while (Cond) {
    const auto *BO = dyn_cast<BinaryOperator>(Cond->IgnoreParenImpCasts());
    if (!BO || !BO->isLogicalOp())
      break;
    Cond = BO->getRHS();
  }
  return Cond;
}

/// The operands of the `&&` (or `||`) chain \p Cond, left to right; a
/// nested operator of the other kind is one operand.
static void chainOperands(const Expr *Cond, BinaryOperatorKind Op,
                          llvm::SmallVectorImpl<const Expr *> &Out) {
  const auto *BO = dyn_cast<BinaryOperator>(Cond->IgnoreParenImpCasts());
  if (!BO || BO->getOpcode() != Op) {
    Out.push_back(Cond);
    return;
  }
  chainOperands(BO->getLHS(), Op, Out);
  chainOperands(BO->getRHS(), Op, Out);
}

/// Whether \p E tests a counter: an integer remainder (`++i % N`), an
/// increment, or a comparison of an integer variable with another integer
/// (`micro_ == accum_`, `step < warmup`); not a call's result or a float.
bool testsCounter(const Expr *E, unsigned Depth) {
  if (!E || Depth > 8)
    return false;
  E = E->IgnoreParenImpCasts();
  auto IsCounter = [](const Expr *Side) {
    Side = Side->IgnoreParenImpCasts();
    if (const auto *UO = dyn_cast<UnaryOperator>(Side);
        UO && UO->isIncrementDecrementOp())
      Side = UO->getSubExpr()->IgnoreParenImpCasts();
    return Side->getType()->isIntegerType() &&
           !Side->getType()->isBooleanType() &&
           (isa<DeclRefExpr>(Side) || isa<MemberExpr>(Side));
  };
  if (const auto *BO = dyn_cast<BinaryOperator>(E)) {
    if (BO->getOpcode() == BO_Rem && BO->getType()->isIntegerType())
      return true;
    if (BO->isComparisonOp() && BO->getLHS()->getType()->isIntegerType() &&
        BO->getRHS()->getType()->isIntegerType() &&
        (IsCounter(BO->getLHS()) || IsCounter(BO->getRHS())))
      return true;
    return testsCounter(BO->getLHS(), Depth + 1) ||
           testsCounter(BO->getRHS(), Depth + 1);
  }
  if (const auto *UO = dyn_cast<UnaryOperator>(E))
    return (UO->isIncrementDecrementOp() &&
            UO->getType()->isIntegerType()) ||
           testsCounter(UO->getSubExpr(), Depth + 1);
  return false;
}

void FlowAnalysis::refineOnEdge(const CFGBlock &Block, const Expr *Cond,
                                bool Taken, State &St) const {
  Model.refineOnBranch(Cond, Taken, St);
  // An `if` on a counter leaves the backward() calls it skips a step for
  // pending by design (gradient accumulation); a loop's own condition, or
  // an `if (!ok) continue;`, does not.
  if (const auto *If = dyn_cast_or_null<IfStmt>(Block.getTerminatorStmt());
      If && Model.testsCounterAt(If->getCond(), St))
    St.path().countPendingBackwards();
  // The whole condition of an if or a loop holds on its edges: `a && b` on
  // the true edge proves each operand, `a || b` on the false edge refutes
  // each. (The blocks of the earlier operands decided theirs already, but a
  // temporary's destructor may join their paths before this block.)
  const Stmt *Terminator = Block.getTerminatorStmt();
  if (!Terminator || isa<BinaryOperator>(Terminator))
    return;
  const auto *Whole = dyn_cast_or_null<Expr>(
      const_cast<CFGBlock &>(Block).getTerminatorCondition(false));
  const auto *Logical =
      Whole ? dyn_cast<BinaryOperator>(Whole->IgnoreParenImpCasts()) : nullptr;
  if (!Logical || !Logical->isLogicalOp() ||
      Taken != (Logical->getOpcode() == BO_LAnd))
    return;
  llvm::SmallVector<const Expr *, 4> Operands;
  chainOperands(Logical, Logical->getOpcode(), Operands);
  for (const Expr *Operand : Operands)
    if (Operand != Cond)
      Model.refineOnBranch(Operand, Taken, St);
}

/// Whether the `&&` or `||` \p Logical is (a part of) the condition of an
/// if or `?:`, not of a loop.
static bool conditionOfBranch(const Stmt &Logical, ASTContext &Ctx) {
  const UserCodeParents &Map = UserCodeParents::of(Ctx);
  DynTypedNode Child = DynTypedNode::create(Logical);
  for (unsigned Depth = 0; Depth < 16; ++Depth) {
    llvm::ArrayRef<DynTypedNode> Parents = Map.parents(Child);
    if (Parents.size() != 1)
      return false;
    const Stmt *Parent = Parents[0].get<Stmt>();
    const Stmt *Came = Child.get<Stmt>();
    if (const auto *If = dyn_cast_or_null<IfStmt>(Parent))
      return If->getCond() == Came;
    if (const auto *Choice = dyn_cast_or_null<ConditionalOperator>(Parent))
      return Choice->getCond() == Came;
    const auto *BO = dyn_cast_or_null<BinaryOperator>(Parent);
    const auto *UO = dyn_cast_or_null<UnaryOperator>(Parent);
    if (!(isa_and_nonnull<ParenExpr, ImplicitCastExpr, ExprWithCleanups>(Parent) ||
          (BO && BO->isLogicalOp()) || (UO && UO->getOpcode() == UO_LNot)))
      return false;
    Child = Parents[0];
  }
  return false;
}

llvm::BitVector FlowAnalysis::feasibleSuccessors(const CFGBlock &Block,
                                                 const Expr *Cond,
                                                 const State &St) const {
  llvm::BitVector Feasible(Block.succ_size(), true);
  const Stmt *Terminator = Block.getTerminatorStmt();
  // A branch whose condition the path decides (`if (phase == Phase::Fit)`
  // where phase holds a known value) takes one edge. A loop's condition
  // (and an operand of `&&` in one) is left alone: a counter
  // known on the first iteration would unroll the loop.
  if (Cond && Block.succ_size() == 2 &&
      (isa_and_nonnull<IfStmt, ConditionalOperator>(Terminator) ||
       (isa_and_nonnull<BinaryOperator>(Terminator) &&
        conditionOfBranch(*Terminator, Model.context())))) {
    if (std::optional<bool> Known = Model.evaluateBool(Cond, St))
      Feasible.reset(*Known ? 1 : 0);
    return Feasible;
  }
  // A switch on a known value goes to its case, or to the default.
  const auto *Switch = dyn_cast_or_null<SwitchStmt>(Terminator);
  if (!Switch)
    return Feasible;
  std::optional<int64_t> Value =
      Model.evaluateScalar(Switch->getCond(), St).Known;
  if (!Value)
    return Feasible;
  auto CaseValue = [&](const CFGBlock *Target) -> std::optional<int64_t> {
    const auto *Case =
        Target ? dyn_cast_or_null<CaseStmt>(Target->getLabel()) : nullptr;
    Expr::EvalResult R;
    if (!Case || Case->getRHS() || Case->getLHS()->isValueDependent() ||
        !Case->getLHS()->EvaluateAsInt(R, Model.context()) ||
        R.Val.getInt().getSignificantBits() > 63)
      return std::nullopt;
    return R.Val.getInt().getExtValue();
  };
  bool Matched = false, Unsure = false;
  for (const CFGBlock::AdjacentBlock &Succ : Block.succs()) {
    const CFGBlock *Target = Succ.getReachableBlock();
    if (Target && isa_and_nonnull<CaseStmt>(Target->getLabel())) {
      std::optional<int64_t> V = CaseValue(Target);
      Unsure |= !V;
      Matched |= V && *V == *Value;
    }
  }
  if (Unsure)
    return Feasible;
  unsigned Index = 0;
  for (const CFGBlock::AdjacentBlock &Succ : Block.succs()) {
    const CFGBlock *Target = Succ.getReachableBlock();
    if (Target && isa_and_nonnull<CaseStmt>(Target->getLabel())) {
      if (*CaseValue(Target) != *Value)
        Feasible.reset(Index);
    } else if (Matched) {
      Feasible.reset(Index); // the default, or past the switch
    }
    ++Index;
  }
  return Feasible;
}

const Expr *FlowAnalysis::branchCondition(const CFGBlock &Block) const {
  if (Block.succ_size() != 2)
    return nullptr;
  const Stmt *Terminator = Block.getTerminatorStmt();
  const auto *Cond = dyn_cast_or_null<Expr>(
      const_cast<CFGBlock &>(Block).getTerminatorCondition(false));
  // The block of `a` in `a && b` has the `&&` itself as its terminator and
  // `a` as its condition; the block that ends an if/loop condition has the
  // whole condition, whose earlier operands are decided already.
  if (Terminator && !isa<BinaryOperator>(Terminator))
    Cond = rightmostOperand(Cond);
  return Cond;
}

/// The join of the states that come around the back edges of a loop whose
/// condition is \p Condition, each as \p Around computes it from the edge's
/// source block; none while no back edge has a state.
template <typename AroundFn>
static std::optional<State> joinBackEdges(const CFGBlock &Condition,
                                          llvm::ArrayRef<unsigned> Order,
                                          AroundFn Around) {
  std::optional<State> Back;
  for (const CFGBlock::AdjacentBlock &Pred : Condition.preds()) {
    const CFGBlock *P = Pred.getReachableBlock();
    if (!P || Order[P->getBlockID()] <= Order[Condition.getBlockID()])
      continue;
    if (std::optional<State> In = Around(*P)) {
      if (Back)
        Back->joinWith(*In);
      else
        Back = std::move(In);
    }
  }
  return Back;
}

bool FlowAnalysis::leaveRangeFor(const CXXForRangeStmt &Loop,
                                 const CFGBlock &Condition,
                                 llvm::ArrayRef<unsigned> Order,
                                 bool NoIteration, State &Out) const {
  Location Container = Model.locationOf(Loop.getRangeInit());
  Location Elements =
      Container ? Container.child(Selector::element()) : Location();
  if (!Elements)
    return true;
  // The loop leaves through its condition once it has visited every
  // element: each holds what the body left in it, as at the back edges.
  // With no back edge reached yet, it ran no iteration: no element.
  std::optional<State> Back =
      joinBackEdges(Condition, Order, [&](const CFGBlock &P) {
        return BlockEntry[P.getBlockID()];
      });
  // Until a back edge has a state, the exit waits: what the first pass
  // computes from elements that hold nothing yet would stay unknown.
  if (!Back && !NoIteration)
    return false;
  Out.forgetTree(Elements);
  if (!Back) {
    ValueFacts Nothing;
    Nothing.Empty = true;
    Out.set(Elements, Nothing);
    return true;
  }
  for (const Location &L : Back->tree(Elements))
    Out.set(L, Back->get(L));
  return true;
}

bool FlowAnalysis::leaveLoopSureToRun(const ForStmt &Loop,
                                      const CFGBlock &Condition,
                                      llvm::ArrayRef<unsigned> Order,
                                      bool NoIteration, State &Out) const {
  if (!Loop.getInc() || !runsAtLeastOnce(&Loop, Owner.getASTContext()))
    return true;
  // A counting loop between constants leaves only after an iteration: its
  // values are those that come around its back edges, not those before it.
  std::optional<State> Back =
      joinBackEdges(Condition, Order, [&](const CFGBlock &P) {
        std::optional<State> Around = BlockEntry[P.getBlockID()];
        if (Around) {
          runBlock(P, *Around, std::nullopt);
          runBlock(Condition, *Around, std::nullopt);
        }
        return Around;
      });
  if (!Back)
    return NoIteration;
  // The values; the path facts of training keep the loop's own exit, whose
  // rules were written for it (a step "left pending" by every path).
  PathFacts Path = std::move(Out.path());
  Out = std::move(*Back);
  Out.path() = std::move(Path);
  return true;
}

//===--- What a branch proves ---------------------------------------------===//

void FlowModel::refineOnBranch(const Expr *Cond, bool Taken, State &St) const {
  if (!Cond)
    return;
  Cond = Cond->IgnoreImplicit()->IgnoreParenImpCasts();
  if (const auto *EWC = dyn_cast<ExprWithCleanups>(Cond))
    Cond = EWC->getSubExpr()->IgnoreParenImpCasts();

  // What the condition proves about the machine.
  ScalarFacts F = evaluateScalar(Cond, St);
  const Implication &Proven = Taken ? F.IfTrue : F.IfFalse;
  const Implication &Refuted = Taken ? F.IfFalse : F.IfTrue;
  PathFacts &P = St.path();
  bool MentionsAvailability = Proven.Cuda || Refuted.Cuda;
  if (Proven.Cuda)
    P.Cuda = CudaGuard::Checked;
  else if (Refuted.Cuda && Refuted.CountAtLeast <= 1)
    // The branch where the availability check failed: no CUDA here.
    P.Cuda = CudaGuard::Unguarded;
  if (Proven.CountAtLeast > P.CountAtLeast) {
    P.CountAtLeast = Proven.CountAtLeast;
    P.CountProof = F.CountComparison ? F.CountComparison : Cond;
  }
  if (MentionsAvailability && !llvm::is_contained(P.AvailabilityChecks, Cond))
    P.AvailabilityChecks.push_back(Cond);

  refineValues(Cond, Taken, St);
}

void FlowModel::refineValues(const Expr *Cond, bool Taken, State &St) const {
  Cond = Cond->IgnoreParenImpCasts();
  if (const auto *Not = dyn_cast<UnaryOperator>(Cond))
    if (Not->getOpcode() == UO_LNot)
      return refineValues(Not->getSubExpr(), !Taken, St);
  // The condition's own variable is known on each edge.
  if (Location L = locationOf(Cond))
    if (Cond->getType()->isBooleanType()) {
      ValueFacts V = heldForUpdate(L, St);
      V.Scalar.Known = Taken;
      St.set(L, V);
      refineAutocast(Cond, L, Taken, St);
      return;
    }
  const auto *Call = dyn_cast<CallExpr>(Cond);
  if (!Call)
    return;
  llvm::StringRef Method = tensorMethodName(*Call);
  if (Method != "is_pinned" && Method != "is_cuda")
    return;
  Location L = locationOf(memberCallObject(*Call));
  if (!L)
    return;
  ValueFacts V = heldForUpdate(L, St);
  if (Method == "is_pinned") {
    // Only CPU tensors are pinned; a tensor that is not pinned may be
    // anywhere. A fact the test only confirms keeps its origin.
    Pinning Proven = Taken ? Pinning::Pinned : Pinning::Pageable;
    if (V.Pin.Value == Proven)
      return;
    if (Taken) {
      V.Pin = {Pinning::Pinned, Call->getExprLoc()};
      V.Device = {DeviceValue::cpu(), Call->getExprLoc()};
    } else if (V.Device.Value.isCPU()) {
      V.Pin = {Pinning::Pageable, Call->getExprLoc()};
    }
  } else if (Taken && !V.Device.Value.isCUDA()) {
    V.Device = {DeviceValue::cuda(), Call->getExprLoc()};
  } else {
    return;
  }
  St.set(L, V);
}

} // namespace clang::tidy::torch

