//===--- HostSyncInLoopCheck.cpp - torch-tidy -----------------------------===//
//
// A synchronisation is reported when three things hold:
//  1. it is a host-device sync: `.item()`, `.cpu()`, a blocking
//     `.to(<CPU>)`, `<<` of a tensor into a std::ostream on a tensor that the
//     flow analysis proves to be on CUDA or on a device variable that may hold
//     CUDA; or a synchronize call (isSynchronizeCall), which needs no tensor;
//  2. one of the MaxLoopDepth innermost loops that repeat it is a training
//     loop: its body calls `backward()`, an optimizer's `step()` or one of the
//     TrainingStepFunctions (recognised by utils/TrainingLoop.h), outside any
//     nested loop or lambda;
//  3. it runs on every iteration of that loop: no if/switch/?:/&&/||/catch,
//     lambda or function boundary lies between it and the loop, no
//     `continue` of a loop on that path comes before it, and the training
//     loop contains no goto.
//
//===----------------------------------------------------------------------===//

#include "HostSyncInLoopCheck.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "utils/TorchMatchers.h"
#include "utils/TrainingLoop.h"
#include "utils/UserCodeParents.h"
#include "llvm/ADT/DenseMap.h"

namespace clang::tidy::torch {

HostSyncInLoopCheck::HostSyncInLoopCheck(StringRef Name,
                                         ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawTrainingStepFunctions(Options.get("TrainingStepFunctions", "")),
      RawExtraSyncFunctions(Options.get("ExtraSyncFunctions", "")),
      MaxLoopDepth(std::max(1u, Options.get("MaxLoopDepth", 1u))) {
  ApiOptions.ExtraStepFunctions = parseNameList(RawTrainingStepFunctions);
  ApiOptions.ExtraSyncFunctions = parseNameList(RawExtraSyncFunctions);
}

void HostSyncInLoopCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "TrainingStepFunctions", RawTrainingStepFunctions);
  Options.store(Opts, "ExtraSyncFunctions", RawExtraSyncFunctions);
  Options.store(Opts, "MaxLoopDepth", MaxLoopDepth);
}

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

struct TrainingLoop {
  const Stmt *Loop = nullptr;
  const CallExpr *StepCall = nullptr;
};

} // namespace

void HostSyncInLoopCheck::checkBody(const FunctionDecl &,
                                    const TensorFlowAnalysis &Analysis,
                                    ProgramModel &Program) {
  const TensorModel &Model = Analysis.model();
  ASTContext &Ctx = Program.context();

  llvm::DenseMap<const Stmt *, const CallExpr *> StepCallOf;
  auto StepCall = [&](const Stmt &Loop) {
    auto [It, Inserted] = StepCallOf.try_emplace(&Loop, nullptr);
    if (Inserted)
      for (const Stmt *Part : repeatedParts(Loop))
        if ((It->second = findStepInLoop(Part, Program)))
          break;
    return It->second;
  };

  // The training loop that runs \p S on each of its iterations, if any.
  auto UnconditionalTrainingLoop = [&](const Stmt &S) -> TrainingLoop {
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
        if (const CallExpr *Step = StepCall(*ParentStmt)) {
          for (const Stmt *Loop : LoopsOnPath)
            for (const Stmt *Part : repeatedParts(*Loop))
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
  };

  auto Quoted = [&](const Expr *E, StringRef Fallback) {
    return quotedSource(E, Ctx, Fallback, /*MaxLength=*/48);
  };

  Analysis.replay([&](const Stmt &S, const TensorState &State) {
    const auto *Call = dyn_cast<CallExpr>(&S);
    if (!Call)
      return;

    // The tensor that is read back, when the sync is a tensor read.
    const Expr *Tensor = nullptr;
    bool IsPrint = false;
    bool IsSynchronize = false;
    SourceLocation Loc = Call->getBeginLoc();
    if (const auto *Member = dyn_cast<MemberExpr>(Call->getCallee()))
      Loc = Member->getMemberLoc();

    StringRef Method = tensorMethodName(*Call);
    if (Method == "item" || Method == "cpu") {
      Tensor = memberCallObject(*Call);
    } else if (Method == "to") {
      // Only a blocking copy to a known CPU destination.
      const Expr *NonBlocking = argumentForParameter(*Call, "non_blocking");
      if (NonBlocking && Model.evaluateBool(NonBlocking, State) != false)
        return;
      bool ToCPU = false;
      for (StringRef P : {"options", "device"})
        if (const Expr *Dest = argumentForParameter(*Call, P))
          ToCPU = ToCPU || Model.evaluateDeviceSpec(Dest, State).Value.isCPU();
      if (const Expr *Other = argumentForParameter(*Call, "other"))
        ToCPU = Model.evaluate(Other, State).Device.Value.isCPU();
      if (!ToCPU)
        return;
      Tensor = memberCallObject(*Call);
    } else if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Call)) {
      if (Op->getOperator() != OO_LessLess || Op->getNumArgs() != 2 ||
          !isTensorType(Op->getArg(1)->getType()))
        return;
      const FunctionDecl *FD = Op->getDirectCallee();
      if (!FD || FD->getNumParams() < 1)
        return;
      const CXXRecordDecl *Stream = FD->getParamDecl(0)
                                        ->getType()
                                        .getNonReferenceType()
                                        ->getAsCXXRecordDecl();
      if (!Stream || Stream->getQualifiedNameAsString() != "std::basic_ostream")
        return;
      Tensor = Op->getArg(1);
      IsPrint = true;
      Loc = Op->getOperatorLoc();
    } else if (isSynchronizeCall(*Call, Program.options())) {
      IsSynchronize = true;
    } else {
      return;
    }

    ValueFacts Facts;
    if (Tensor) {
      Facts = Model.evaluate(Tensor, State);
      if (!Facts.Device.Value.mayBeCUDA())
        return;
    }
    TrainingLoop Where = UnconditionalTrainingLoop(S);
    if (!Where.Loop || !firstAt(Loc))
      return;

    std::string When;
    if (Tensor && Facts.Device.Value.isSymbolic())
      When = " where " + Facts.Device.Value.describe() + " is CUDA";
    if (IsPrint)
      diag(Loc, "printing %0 copies it to the host and synchronises with the "
                "GPU on every training step%1; the GPU idles while the host "
                "waits; print under a condition (e.g. every N steps) or "
                "accumulate on the device")
          << Quoted(Tensor, "a tensor") << When;
    else if (IsSynchronize)
      diag(Loc, "%0 blocks the host until the GPU is idle on every training "
                "step; the GPU idles while the host launches the next "
                "kernels; synchronise under a condition (e.g. every N steps) "
                "or not at all")
          << Quoted(Call, "synchronize()");
    else
      diag(Loc, "%0 synchronises the host with the GPU on every training "
                "step%1; the GPU idles while the host waits; sync under a "
                "condition (e.g. every N steps) or accumulate on the device")
          << Quoted(Call, ("'." + Method + "()'").str()) << When;

    std::string StepName;
    if (const FunctionDecl *FD = Where.StepCall->getDirectCallee())
      StepName = FD->getNameAsString() + "()";
    SourceLocation StepLoc = Where.StepCall->getBeginLoc();
    if (const auto *Member = dyn_cast<MemberExpr>(Where.StepCall->getCallee()))
      StepLoc = Member->getMemberLoc();
    diag(StepLoc, "inside this training loop, which calls '%0'",
         DiagnosticIDs::Note)
        << StepName;
    if (Tensor)
      noteFact(Facts.Device, Quoted(Tensor, "the tensor"),
               "%0 is on %1 from here", Facts.Device.Value.describe());
  });
}

} // namespace clang::tidy::torch
