//===--- TrainingLoopRepeats.cpp - torch-tidy -----------------------------===//

#include "TrainingLoopRepeats.h"
#include "ProgramModel.h"
#include "api/TorchMatchers.h"
#include "model/TrainingLoop.h"
#include "model/UserCodeParents.h"
#include "clang/AST/StmtCXX.h"

namespace clang::tidy::torch {

namespace {

/// `do { ... } while (false)`, the statement-macro idiom: runs once.
bool isRunOnceDo(const Stmt &S, const ASTContext &Ctx) {
  const auto *Do = dyn_cast<DoStmt>(&S);
  if (!Do || !Do->getCond())
    return false;
  bool Value = true;
  return !Do->getCond()->isValueDependent() &&
         Do->getCond()->EvaluateAsBooleanCondition(Value, Ctx) && !Value;
}

bool isLoop(const Stmt &S, const ASTContext &Ctx) {
  return isa<ForStmt, CXXForRangeStmt, WhileStmt, DoStmt>(&S) &&
         !isRunOnceDo(S, Ctx);
}

/// The first training-step call in \p S, outside nested loops and lambdas.
///
/// Unlike findTrainingCall, this does not descend into nested loops: an epoch
/// loop whose inner batch loop trains is not itself a training loop.
const CallExpr *findStepInLoop(const Stmt *S, ProgramModel &Program) {
  if (!S || isa<LambdaExpr>(S) || isLoop(*S, Program.context()))
    return nullptr;
  // A backward pass or an optimizer step (TrainingLoop.h), a project's own
  // training-step function, or a user function whose summary runs one.
  if (const auto *Call = dyn_cast<CallExpr>(S))
    if (callTrains(*Call, Program, TrainingCall::BackwardOrStep))
      return Call;
  for (const Stmt *Child : S->children())
    if (const CallExpr *Found = findStepInLoop(Child, Program))
      return Found;
  return nullptr;
}

/// The parts of a loop that run on every iteration.
llvm::SmallVector<const Stmt *, 3> repeatedParts(const Stmt &Loop) {
  if (const auto *For = dyn_cast<ForStmt>(&Loop))
    return {For->getCond(), For->getInc(), For->getBody()};
  if (const auto *RangeFor = dyn_cast<CXXForRangeStmt>(&Loop))
    return {RangeFor->getBody()};
  if (const auto *While = dyn_cast<WhileStmt>(&Loop))
    return {While->getCond(), While->getBody()};
  if (const auto *Do = dyn_cast<DoStmt>(&Loop))
    return {Do->getBody(), Do->getCond()};
  return {};
}

/// Whether \p S holds a `continue` of the loop it belongs to (not of a nested
/// loop) that starts before \p Before.
bool hasContinueBefore(const Stmt *S, SourceLocation Before,
                       const ASTContext &Ctx) {
  if (!S || isa<LambdaExpr>(S) || isLoop(*S, Ctx))
    return false;
  if (isa<ContinueStmt>(S)) {
    const SourceManager &SM = Ctx.getSourceManager();
    return SM.isBeforeInTranslationUnit(SM.getExpansionLoc(S->getBeginLoc()),
                                        SM.getExpansionLoc(Before));
  }
  for (const Stmt *Child : S->children())
    if (hasContinueBefore(Child, Before, Ctx))
      return true;
  return false;
}

bool containsGoto(const Stmt *S) {
  if (!S || isa<LambdaExpr>(S))
    return false;
  if (isa<GotoStmt, IndirectGotoStmt>(S))
    return true;
  for (const Stmt *Child : S->children())
    if (containsGoto(Child))
      return true;
  return false;
}

/// True when \p Child, a direct child of \p Parent, runs only on some of the
/// paths through \p Parent.
bool isConditionalChild(const Stmt &Parent, const Stmt &Child) {
  if (const auto *If = dyn_cast<IfStmt>(&Parent))
    return &Child == If->getThen() || &Child == If->getElse();
  if (const auto *Switch = dyn_cast<SwitchStmt>(&Parent))
    return &Child == Switch->getBody();
  if (const auto *Cond = dyn_cast<ConditionalOperator>(&Parent))
    return &Child == Cond->getTrueExpr() || &Child == Cond->getFalseExpr();
  if (const auto *Cond = dyn_cast<BinaryConditionalOperator>(&Parent))
    return &Child == Cond->getFalseExpr();
  if (const auto *Bin = dyn_cast<BinaryOperator>(&Parent))
    return Bin->isLogicalOp() && &Child == Bin->getRHS();
  return isa<CXXCatchStmt, SEHExceptStmt, SEHFinallyStmt, SwitchCase>(
      &Parent);
}


} // namespace

const CallExpr *TrainingLoopRepeats::stepCall(const Stmt &Loop) {
  auto [It, Inserted] = StepCalls.try_emplace(&Loop, nullptr);
  if (Inserted)
    for (const Stmt *Part : repeatedParts(Loop))
      if ((It->second = findStepInLoop(Part, Program)))
        break;
  return It->second;
}

TrainingLoopRepeats::Loop TrainingLoopRepeats::at(const Stmt &S) {
  ASTContext &Ctx = Program.context();
  llvm::SmallVector<const Stmt *, 2> LoopsOnPath;
  DynTypedNode Child = DynTypedNode::create(S);
  while (true) {
    llvm::ArrayRef<DynTypedNode> Parents = userCodeParents(Child, Ctx);
    if (Parents.size() != 1)
      return {};
    const DynTypedNode &Parent = Parents[0];
    const auto *ParentStmt = Parent.get<Stmt>();
    if (!ParentStmt) {
      // A declaration's initializer continues at its DeclStmt; any other
      // declaration (function, lambda class, record) ends the search.
      if (!Parent.get<VarDecl>() && !Parent.get<DecompositionDecl>())
        return {};
      Child = Parent;
      continue;
    }
    const auto *ChildStmt = Child.get<Stmt>();
    if (isa<LambdaExpr>(ParentStmt) ||
        (ChildStmt && isConditionalChild(*ParentStmt, *ChildStmt)))
      return {};
    if (ChildStmt && isLoop(*ParentStmt, Ctx) &&
        isRepeatedPartOfLoop(*ParentStmt, *ChildStmt)) {
      LoopsOnPath.push_back(ParentStmt);
      if (const CallExpr *Step = stepCall(*ParentStmt)) {
        for (const Stmt *L : LoopsOnPath)
          for (const Stmt *Part : repeatedParts(*L))
            if (hasContinueBefore(Part, S.getBeginLoc(), Ctx))
              return {};
        if (containsGoto(ParentStmt))
          return {};
        return {ParentStmt, Step};
      }
      if (LoopsOnPath.size() >= MaxLoopDepth)
        return {};
    }
    Child = Parent;
  }
}

} // namespace clang::tidy::torch
