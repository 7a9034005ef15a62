//===--- FlowAnalysis.cpp - torch-tidy ------------------------------------===//

#include "FlowAnalysis.h"
#include <map>
#include "ProgramModel.h"
#include "support/UserCodeParents.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/StmtCXX.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

/// Whether \p Type, or an element of it, is a class that failed to compile:
/// the CFG's implicit destructor of such a value crashes clang.
static bool isBrokenClass(QualType Type) {
  const auto *RD = Type.isNull() ? nullptr
                                 : Type->getBaseElementTypeUnsafe()
                                       ->getAsCXXRecordDecl();
  return RD && RD->isInvalidDecl();
}

/// Whether clang can build the CFG of \p Function: a TU with compiler errors
/// may leave invalid declarations (a class whose header failed) behind.
static bool buildsCleanCFG(const FunctionDecl &Function) {
  if (Function.isInvalidDecl())
    return false;
  if (const auto *Method = dyn_cast<CXXMethodDecl>(&Function)) {
    const CXXRecordDecl *Class = Method->getParent();
    if (Class->isInvalidDecl())
      return false;
    for (const FieldDecl *Field : Class->fields())
      if (Field->isInvalidDecl() || isBrokenClass(Field->getType()))
        return false;
  }
  return !Function.getASTContext().getDiagnostics().hasErrorOccurred() ||
         llvm::none_of(Function.decls(), [](const Decl *D) {
           const auto *Var = dyn_cast<VarDecl>(D);
           return D->isInvalidDecl() || (Var && isBrokenClass(Var->getType()));
         });
}

std::unique_ptr<FlowAnalysis> FlowAnalysis::run(const FunctionDecl &Function,
                                                ProgramModel &Program,
                                                State Entry,
                                                unsigned VisitsPerBlock) {
  const Stmt *Body = Function.getBody();
  if (!Body || !buildsCleanCFG(Function))
    return nullptr;
  CFG::BuildOptions Options;
  // The end of an RAII guard's scope restores what it saved.
  Options.AddImplicitDtors = true;
  Options.AddTemporaryDtors = false;
  // A constructor's member initialisers run first: they set class state.
  Options.AddInitializers = true;
  Options.AddCXXDefaultInitExprInCtors = true;
  std::unique_ptr<CFG> Graph =
      CFG::buildCFG(&Function, const_cast<Stmt *>(Body),
                    &Function.getASTContext(), Options);
  if (!Graph)
    return nullptr;
  std::unique_ptr<FlowAnalysis> Analysis(
      new FlowAnalysis(Function, Program, std::move(Graph), std::move(Entry)));
  Analysis->solve(VisitsPerBlock);
  if (const char *Dump = std::getenv("TORCH_TIDY_DUMP");
      Dump && Function.getNameAsString() == Dump)
    Analysis->dump(llvm::errs());
  return Analysis;
}

/// For debugging: `TORCH_TIDY_DUMP=<function name>` prints each statement of
/// that function's analyses with the state before it.
void FlowAnalysis::dump(llvm::raw_ostream &OS) const {
  const SourceManager &SM = Owner.getASTContext().getSourceManager();
  OS << "=== " << (Function ? Function->getNameAsString() : "") << "\n";
  replay([&](const Stmt &S, const State &St) {
    if (!isa<Expr>(S) && !isa<DeclStmt>(S))
      return;
    OS << S.getStmtClassName() << " @" << SM.getPresumedLineNumber(S.getBeginLoc())
       << ":" << SM.getPresumedColumnNumber(S.getBeginLoc()) << "  cuda="
       << int(St.path().Cuda) << " grad=" << int(St.path().Grad)
       << " backprop=" << St.path().GraphsBackpropagated.size();
    for (const Stmt *B : St.path().GraphsBackpropagated)
      OS << " " << SM.getPresumedLineNumber(B->getBeginLoc()) << ":"
         << SM.getPresumedColumnNumber(B->getBeginLoc());
    OS << (St.path().BackpropagatedOther ? " other" : "")
       << " autocast=" << int(St.path().Autocast)
       << (St.path().AutocastHalf ? " half" : "") << "\n";
    St.forEach([&](const Location &L, const ValueFacts &V) {
      OS << "    "
         << (L.Root ? L.Root->getNameAsString()
                    : L.Kind == Location::This ? "this" : "<ret>");
      for (unsigned I = 0; I < L.Depth; ++I) {
        Selector Step = Selector::fromRaw(L.Path[I]);
        if (const FieldDecl *F = Step.asField())
          OS << "." << F->getName();
        else if (Step.isElement())
          OS << "[]";
        else
          OS << "<" << Step.tupleIndex() << ">";
      }
      OS << ": dev="
         << V.Device.Value.describe()
         << (V.Device.Entry ? "(entry " + V.Device.Entry->getNameAsString() +
                                  (V.Device.AlsoEntry
                                       ? (V.Device.EitherEntry ? "|" : "&") +
                                             V.Device.AlsoEntry->getNameAsString()
                                       : "") +
                                  ")"
                            : "")
         << (V.FromDeviceConflict ? " conflict" : "")
         << " pin=" << int(V.Pin.Value) << " graph=" << int(V.Graph.Value)
         << (V.Empty ? " empty" : "") << (V.mayBeZeroDim() ? "" : " ndim") << (V.PendingCopy.isValid() ? " pending" : "")
         << " mode=" << int(V.Mode.Value) << (V.Mode.Entry ? "(entry)" : "")
         << (V.ModeIf ? "(if " + V.ModeIf.Param->getNameAsString() + ")" : "")
         << " layers=" << int(V.ModeLayers) << (V.KeepsCallerFacts ? " keeps" : "") << " mean=" << int(V.MeanLoss) << (V.HalfAutocast.isValid() ? " half" : "")
         << " src=" << V.GraphSources.size();
      for (const Stmt *Source : V.GraphSources)
        OS << " " << Source->getStmtClassName() << "@" << SM.getPresumedLineNumber(Source->getBeginLoc()) << ":"
           << SM.getPresumedColumnNumber(Source->getBeginLoc());
      if (!V.Callables.empty()) {
        OS << (V.CallablesKnown ? " calls=" : " may-call=");
        for (const FunctionDecl *F : V.Callables)
          OS << SM.getPresumedLineNumber(F->getLocation()) << ":"
             << SM.getPresumedColumnNumber(F->getLocation()) << " ";
      }
      OS << "\n";
    });
  });
}

std::unique_ptr<FlowAnalysis>
FlowAnalysis::runInitializer(const VarDecl &Global, ProgramModel &Program,
                             State Entry) {
  const Expr *Init = Global.getInit();
  if (!Init)
    return nullptr;
  CFG::BuildOptions Options;
  std::unique_ptr<CFG> Graph =
      CFG::buildCFG(&Global, const_cast<Expr *>(Init),
                    &Global.getASTContext(), Options);
  if (!Graph)
    return nullptr;
  std::unique_ptr<FlowAnalysis> Analysis(
      new FlowAnalysis(Global, Program, std::move(Graph), std::move(Entry)));
  Analysis->solve(DefaultVisitsPerBlock);
  return Analysis;
}

FlowAnalysis::FlowAnalysis(const Decl &Owner, ProgramModel &Program,
                           std::unique_ptr<CFG> G, State E)
    : Owner(Owner), Function(dyn_cast<FunctionDecl>(&Owner)), Program(Program),
      Model(&Owner, Owner.getASTContext(), Program), Graph(std::move(G)),
      Entry(std::move(E)) {
  for (const CFGBlock *Block : *Graph)
    for (const CFGElement &El : *Block)
      if (auto S = El.getAs<CFGStmt>())
        Elements.insert(S->getStmt());
  BlockEntry.resize(Graph->getNumBlockIDs());
  computeThrowEdges();
  computeReversePostOrder();
}

void FlowAnalysis::computeThrowEdges() {
  ThrowsTo.resize(Graph->getNumBlockIDs());
  ThrownFrom.resize(Graph->getNumBlockIDs());
  const SourceManager &SM = Owner.getASTContext().getSourceManager();
  for (auto It = Graph->try_blocks_begin(); It != Graph->try_blocks_end();
       ++It) {
    const CFGBlock *Dispatch = *It;
    const auto *Try =
        dyn_cast_or_null<CXXTryStmt>(Dispatch->getTerminatorStmt());
    if (!Try)
      continue;
    SourceRange Range = Try->getTryBlock()->getSourceRange();
    for (const CFGBlock *Block : *Graph) {
      if (Block == Dispatch)
        continue;
      bool InTry = false;
      for (const CFGElement &El : *Block)
        if (auto S = El.getAs<CFGStmt>();
            S && SM.isPointWithin(S->getStmt()->getBeginLoc(),
                                  Range.getBegin(), Range.getEnd())) {
          MayThrow.insert(S->getStmt());
          InTry = true;
        }
      if (!InTry)
        continue;
      ThrowsTo[Block->getBlockID()].push_back(Dispatch);
      ThrownFrom[Dispatch->getBlockID()].push_back(Block);
    }
  }
}

void FlowAnalysis::computeReversePostOrder() {
  // An explicit DFS: CFG edges pruned as unreachable (`for (;;)`'s exit)
  // are null, which llvm::ReversePostOrderTraversal does not expect.
  // Successors are visited last to first (a loop's exit before its body,
  // handlers first), so that a loop's body comes right after its condition
  // in the order, before what follows the loop: the solver settles a loop
  // before it runs the code after it, which it otherwise reruns on every
  // iteration of every loop before it.
  auto Successors = [&](const CFGBlock *Block) {
    llvm::SmallVector<const CFGBlock *, 4> Out;
    llvm::append_range(Out, ThrowsTo[Block->getBlockID()]);
    for (const CFGBlock::AdjacentBlock &Succ : llvm::reverse(Block->succs()))
      if (const CFGBlock *S = Succ.getReachableBlock())
        Out.push_back(S);
    return Out;
  };
  std::vector<bool> Seen(Graph->getNumBlockIDs(), false);
  struct Frame {
    const CFGBlock *Block;
    llvm::SmallVector<const CFGBlock *, 4> Succs;
    unsigned Next = 0;
  };
  std::vector<Frame> Stack;
  const CFGBlock *Start = &Graph->getEntry();
  Seen[Start->getBlockID()] = true;
  Stack.push_back({Start, Successors(Start)});
  while (!Stack.empty()) {
    Frame &Top = Stack.back();
    if (Top.Next == Top.Succs.size()) {
      ReversePostOrder.push_back(Top.Block);
      Stack.pop_back();
      continue;
    }
    const CFGBlock *Succ = Top.Succs[Top.Next++];
    if (!Seen[Succ->getBlockID()]) {
      Seen[Succ->getBlockID()] = true;
      Stack.push_back({Succ, Successors(Succ)});
    }
  }
  std::reverse(ReversePostOrder.begin(), ReversePostOrder.end());
}

void FlowAnalysis::walk(const Stmt *S, bool IsElement, State &St,
                        std::optional<Observer> Visit) const {
  if (!S)
    return;
  // A sub-statement that is a CFG element of its own runs in its block.
  if (!IsElement && Elements.contains(S))
    return;
  // Lambda bodies are analysed as functions of their own.
  if (!isa<LambdaExpr>(S))
    for (const Stmt *Child : S->children())
      walk(Child, /*IsElement=*/false, St, Visit);
  if (Visit)
    (*Visit)(*S, St);
  Model.transfer(*S, St);
}

void FlowAnalysis::runBlock(const CFGBlock &Block, State &St,
                            std::optional<Observer> Visit,
                            std::optional<State> *Thrown,
                            DestructionObserver OnDestroy) const {
  auto MayLeave = [&] {
    if (!*Thrown)
      *Thrown = St;
    else
      (*Thrown)->joinWith(St);
  };
  if (const auto *Catch = dyn_cast_or_null<CXXCatchStmt>(Block.getLabel()))
    for (const CFGBlock::AdjacentBlock &Pred : Block.preds())
      if (const auto *Try = dyn_cast_or_null<CXXTryStmt>(
              Pred ? Pred->getTerminatorStmt() : nullptr)) {
        Model.enterHandler(*Catch, *Try, St);
        break;
      }
  bool LastMayThrow = false;
  for (const CFGElement &El : Block) {
    auto S = El.getAs<CFGStmt>();
    if (S)
      LastMayThrow = MayThrow.contains(S->getStmt());
    if (Thrown && LastMayThrow)
      MayLeave();
    if (S) {
      walk(S->getStmt(), /*IsElement=*/true, St, Visit);
    } else if (auto Init = El.getAs<CFGInitializer>()) {
      const CXXCtorInitializer *I = Init->getInitializer();
      const Expr *Value = I->getInit();
      if (const auto *Default = dyn_cast_or_null<CXXDefaultInitExpr>(Value))
        Value = Default->getExpr();
      walk(Value, /*IsElement=*/true, St, Visit);
      Model.initializeMember(*I, St);
    } else if (auto Dtor = El.getAs<CFGAutomaticObjDtor>()) {
      // Scope ends after the statements that may throw: an exception left
      // before it (a guard's destructor runs in the handler's path).
      if (OnDestroy)
        OnDestroy(*Dtor->getVarDecl(), St);
      Model.transferDestructor(*Dtor->getVarDecl(), St);
      LastMayThrow = false;
    }
  }
  if (Thrown && LastMayThrow)
    MayLeave();
}

const State *FlowAnalysis::exitState() const {
  const std::optional<State> &Exit = BlockEntry[Graph->getExit().getBlockID()];
  return Exit ? &*Exit : nullptr;
}

/// Whether \p Block ends by throwing out of the function: clang's CFG sends
/// a `throw` outside any try block, and a call that never returns
/// (`TORCH_CHECK`'s failure, `std::abort()`), to the exit, but the caller
/// never sees that state returned.
static bool throwsToExit(const CFGBlock &Block, const CFG &Graph) {
  if (isa_and_nonnull<CXXTryStmt>(Block.getTerminatorStmt()))
    return false; // Its edge to the exit is handled per successor.
  if (Block.succ_size() != 1 || *Block.succ_begin() != &Graph.getExit())
    return false;
  for (auto It = Block.rbegin(); It != Block.rend(); ++It)
    if (auto S = It->getAs<CFGStmt>()) {
      if (const auto *Call = dyn_cast<CallExpr>(S->getStmt()))
        if (const FunctionDecl *Callee = Call->getDirectCallee())
          return Callee->isNoReturn();
      return isa<CXXThrowExpr>(S->getStmt());
    }
  return false;
}

std::vector<State> FlowAnalysis::endStates() const {
  std::vector<State> Out;
  for (const CFGBlock *Block : ReversePostOrder) {
    if (Block == &Graph->getExit())
      continue;
    bool AnySuccessor = false;
    for (const CFGBlock::AdjacentBlock &Succ : Block->succs())
      AnySuccessor |= Succ.isReachable();
    AnySuccessor &= !throwsToExit(*Block, *Graph);
    const std::optional<State> &In = BlockEntry[Block->getBlockID()];
    if (AnySuccessor || !In)
      continue;
    State St = *In;
    runBlock(*Block, St, std::nullopt);
    Out.push_back(std::move(St));
  }
  if (const State *Exit = exitState())
    Out.push_back(*Exit);
  return Out;
}

void FlowAnalysis::solve(unsigned VisitsPerBlock) {
  std::vector<unsigned> Order(Graph->getNumBlockIDs(), 0);
  for (unsigned I = 0; I < ReversePostOrder.size(); ++I)
    Order[ReversePostOrder[I]->getBlockID()] = I;
  std::set<unsigned> Worklist;
  const CFGBlock &Start = Graph->getEntry();
  BlockEntry[Start.getBlockID()] = Entry;
  Worklist.insert(Order[Start.getBlockID()]);

  size_t Budget = static_cast<size_t>(VisitsPerBlock) * ReversePostOrder.size();
  // Each block's entry is the join of what its incoming edges carry now: a
  // forward edge carries its source's latest state, so a value that an
  // early pass saw (a device before the loop that sets it has settled) does
  // not stay joined in. A back edge accumulates, so that loops converge.
  std::vector<std::map<std::pair<unsigned, unsigned>, State>> Incoming(
      Graph->getNumBlockIDs());
  // Another function's variable that a hook captured is, where a path has
  // not written it, what it held at entry (not unknown).
  auto JoinInto = [&](State &Into, const State &Other) {
    Into.joinWith(Other, [&](const Location &L) {
      return isForeignVariable(L, Function);
    });
  };
  auto Arrive = [&](const CFGBlock &From, unsigned Edge, const CFGBlock &To,
                    State Out) {
    auto &Edges = Incoming[To.getBlockID()];
    auto [It, New] = Edges.try_emplace({From.getBlockID(), Edge}, Out);
    if (!New) {
      if (Order[From.getBlockID()] >= Order[To.getBlockID()])
        JoinInto(It->second, Out);
      else
        It->second = std::move(Out);
    }
    std::optional<State> Joined;
    for (const auto &[Key, EdgeState] : Edges) {
      if (Joined)
        JoinInto(*Joined, EdgeState);
      else
        Joined = EdgeState;
    }
    std::optional<State> &In = BlockEntry[To.getBlockID()];
    if (In && *In == *Joined)
      return;
    In = std::move(Joined);
    Worklist.insert(Order[To.getBlockID()]);
  };
  // Range-for exits waiting for a back edge; once nothing else is left, they
  // leave as loops that ran no iteration.
  llvm::SmallPtrSet<const CFGBlock *, 2> Waiting, NoIteration;
  for (;;) {
  while (!Worklist.empty()) {
    if (Budget-- == 0) {
      reportCap(VisitsPerBlock);
      return; // Converged stays false.
    }
    const CFGBlock *Block = ReversePostOrder[*Worklist.begin()];
    Worklist.erase(Worklist.begin());
    State St = *BlockEntry[Block->getBlockID()];
    const auto &Dispatches = ThrowsTo[Block->getBlockID()];
    std::optional<State> Thrown;
    runBlock(*Block, St, std::nullopt, Dispatches.empty() ? nullptr : &Thrown);

    const Expr *Cond = branchCondition(*Block);
    unsigned SuccIndex = 0;
    bool Throws = throwsToExit(*Block, *Graph);
    // A try's dispatch block goes to the exit for an exception no handler
    // catches: it leaves the function without returning.
    bool Dispatch = isa_and_nonnull<CXXTryStmt>(Block->getTerminatorStmt());
    llvm::BitVector Feasible = feasibleSuccessors(*Block, Cond, St);
    for (const CFGBlock::AdjacentBlock &Succ : Block->succs()) {
      unsigned Index = SuccIndex++;
      if (!Succ.isReachable() || Throws || !Feasible.test(Index) ||
          (Dispatch && Succ.getReachableBlock() == &Graph->getExit()))
        continue;
      const CFGBlock *Next = Succ.getReachableBlock();
      State Out = St;
      if (Cond)
        refineOnEdge(*Block, Cond, /*Taken=*/Index == 0, Out);
      if (const auto *ForRange =
              dyn_cast_or_null<CXXForRangeStmt>(Block->getTerminatorStmt());
          ForRange && Index == 0)
        Model.enterRangeFor(*ForRange, Out);
      if (Index == 1)
        if (const auto *ForRange =
                dyn_cast_or_null<CXXForRangeStmt>(Block->getTerminatorStmt()))
          if (!leaveRangeFor(*ForRange, *Block, Order,
                             NoIteration.contains(Block), Out)) {
            Waiting.insert(Block);
            continue;
          }
      if (Index == 1)
        if (const auto *For =
                dyn_cast_or_null<ForStmt>(Block->getTerminatorStmt()))
          if (!leaveLoopSureToRun(*For, *Block, Order,
                                  NoIteration.contains(Block), Out)) {
            Waiting.insert(Block);
            continue;
          }
      Arrive(*Block, Index, *Next, std::move(Out));
    }
    for (const CFGBlock *Dispatch : Dispatches) {
      if (!Thrown)
        break;
      Arrive(*Block, ~0u, *Dispatch, *Thrown);
    }
  }
  for (const CFGBlock *Block : Waiting)
    if (NoIteration.insert(Block).second)
      Worklist.insert(Order[Block->getBlockID()]);
  Waiting.clear();
  if (Worklist.empty())
    break;
  }
  Converged = true;
}

static std::atomic<FlowAnalysis::CapReporter> CapReport{nullptr};

void FlowAnalysis::setCapReporter(CapReporter Report) { CapReport = Report; }

void FlowAnalysis::reportCap(unsigned VisitsPerBlock) const {
  CapReporter Report = CapReport;
  if (!Report)
    return;
  const SourceManager &SM = Owner.getASTContext().getSourceManager();
  PresumedLoc Where =
      SM.getPresumedLoc(SM.getExpansionLoc(Owner.getLocation()));
  std::string Name = "a lambda";
  const auto *Method = dyn_cast<CXXMethodDecl>(&Owner);
  if (!Method || !Method->getParent()->isLambda())
    if (const auto *ND = dyn_cast<NamedDecl>(&Owner))
      Name = "'" + ND->getQualifiedNameAsString() + "'";
  std::string Message = llvm::formatv(
      "{0}:{1}:{2}: the dataflow analysis of {3} stopped after {4} visits per "
      "block without converging; the flow-sensitive checks report nothing "
      "in it",
      Where.isValid() ? Where.getFilename() : "<unknown>",
      Where.isValid() ? Where.getLine() : 0,
      Where.isValid() ? Where.getColumn() : 0, Name, VisitsPerBlock);
  // A function may be analysed more than once (with and without its
  // callers' context).
  static std::mutex ReportedMutex;
  static llvm::StringSet<> Reported;
  {
    std::lock_guard<std::mutex> Lock(ReportedMutex);
    if (!Reported.insert(Message).second)
      return;
  }
  Report(Message);
}

void FlowAnalysis::reportBudget(const ASTContext &Ctx, FileID File,
                                unsigned Budget) {
  CapReporter Report = CapReport;
  if (!Report)
    return;
  OptionalFileEntryRef Entry = Ctx.getSourceManager().getFileEntryRefForID(File);
  Report(llvm::formatv("{0}: the dataflow analysis stopped after {1} function "
                       "analyses for the code of this file; the "
                       "flow-sensitive checks report nothing more in it",
                       Entry ? Entry->getName() : "<unknown>", Budget)
             .str());
}

void FlowAnalysis::replay(Observer Visit) const {
  for (const CFGBlock *Block : ReversePostOrder) {
    const std::optional<State> &In = BlockEntry[Block->getBlockID()];
    if (!In)
      continue;
    State St = *In;
    runBlock(*Block, St, Visit);
  }
}

std::optional<State> FlowAnalysis::stateBefore(const Stmt &S) const {
  const CFGBlock *Block = blockOf(S);
  if (!Block)
    return std::nullopt;
  const std::optional<State> &In = BlockEntry[Block->getBlockID()];
  if (!In)
    return std::nullopt;
  std::optional<State> Found;
  State St = *In;
  runBlock(*Block, St, [&](const Stmt &Visited, const State &Before) {
    if (&Visited == &S && !Found)
      Found = Before;
  });
  return Found;
}

std::optional<State> FlowAnalysis::stateAtDestruction(const VarDecl &Var) const {
  std::optional<State> Found;
  for (const CFGBlock *Block : ReversePostOrder) {
    const std::optional<State> &In = BlockEntry[Block->getBlockID()];
    if (!In || llvm::none_of(*Block, [&](const CFGElement &El) {
          auto Dtor = El.getAs<CFGAutomaticObjDtor>();
          return Dtor && Dtor->getVarDecl() == &Var;
        }))
      continue;
    State St = *In;
    runBlock(*Block, St, std::nullopt, nullptr,
             [&](const VarDecl &Destroyed, const State &Before) {
               if (&Destroyed != &Var)
                 return;
               if (Found)
                 Found->joinWith(Before);
               else
                 Found = Before;
             });
  }
  return Found;
}

//===--- Matching -----------------------------------------------------------===//

void registerAnalyzedBodyMatchers(MatchFinder &Finder,
                                  MatchFinder::MatchCallback &CB) {
  Finder.addMatcher(functionDecl(isDefinition(), hasBody(stmt()),
                                 unless(isExpansionInSystemHeader()))
                        .bind("analyzedFunction"),
                    &CB);
  Finder.addMatcher(lambdaExpr(unless(isExpansionInSystemHeader()))
                        .bind("analyzedLambda"),
                    &CB);
}

const FunctionDecl *
getAnalyzedFunction(const MatchFinder::MatchResult &Result) {
  if (const auto *FD =
          Result.Nodes.getNodeAs<FunctionDecl>("analyzedFunction")) {
    // Lambda bodies are matched as lambdas, but for the instantiations of a
    // generic lambda, which only the function matcher sees.
    if (isa<CXXMethodDecl>(FD) &&
        cast<CXXMethodDecl>(FD)->getParent()->isLambda() &&
        !FD->isTemplateInstantiation())
      return nullptr;
    return FD;
  }
  if (const auto *L = Result.Nodes.getNodeAs<LambdaExpr>("analyzedLambda")) {
    const CXXMethodDecl *Op = L->getCallOperator();
    if (!Op || !L->getBody())
      return nullptr;
    return Op;
  }
  return nullptr;
}

} // namespace clang::tidy::torch
