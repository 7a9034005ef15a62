//===--- TensorFlowAnalysis.cpp - torch-tidy ------------------------------===//

#include "TensorFlowAnalysis.h"
#include "model/UserCodeParents.h"
#include "clang/AST/ExprCXX.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

std::unique_ptr<TensorFlowAnalysis>
TensorFlowAnalysis::run(const Decl &Function, const Stmt &Body,
                        ASTContext &Ctx, const TorchApiOptions &Opts,
                        unsigned VisitsPerBlock, ProgramModel *Program,
                        const TensorState *Entry) {
  CFG::BuildOptions Options;
  Options.AddImplicitDtors = false;
  Options.AddTemporaryDtors = false;
  // A constructor's member initialisers run first: they set class state.
  Options.AddInitializers = true;
  Options.AddCXXDefaultInitExprInCtors = true;
  std::unique_ptr<CFG> Graph = CFG::buildCFG(
      &Function, const_cast<Stmt *>(&Body), &Ctx, Options);
  if (!Graph)
    return nullptr;
  std::unique_ptr<TensorFlowAnalysis> Analysis(
      new TensorFlowAnalysis(Function, Body, Ctx, Opts, std::move(Graph),
                             Program, Entry ? *Entry : TensorState()));
  Analysis->solve(VisitsPerBlock);
  return Analysis;
}

TensorFlowAnalysis::TensorFlowAnalysis(const Decl &Function, const Stmt &Body,
                                       ASTContext &Ctx,
                                       const TorchApiOptions &Opts,
                                       std::unique_ptr<CFG> G,
                                       ProgramModel *Program, TensorState E)
    : Function(Function), Model(Function, Body, Ctx, Opts, Program),
      Graph(std::move(G)), Entry(std::move(E)) {
  for (const CFGBlock *Block : *Graph)
    for (const CFGElement &E : *Block)
      if (auto S = E.getAs<CFGStmt>())
        Elements.insert(S->getStmt());
  BlockEntry.resize(Graph->getNumBlockIDs());
  computeReversePostOrder();
}

void TensorFlowAnalysis::computeReversePostOrder() {
  // An explicit DFS: CFG edges pruned as unreachable (`for (;;)`'s exit)
  // are null, which llvm::ReversePostOrderTraversal does not expect.
  std::vector<bool> Seen(Graph->getNumBlockIDs(), false);
  std::vector<std::pair<const CFGBlock *, CFGBlock::const_succ_iterator>> Stack;
  const CFGBlock *Entry = &Graph->getEntry();
  Seen[Entry->getBlockID()] = true;
  Stack.push_back({Entry, Entry->succ_begin()});
  while (!Stack.empty()) {
    auto &[Block, Next] = Stack.back();
    if (Next == Block->succ_end()) {
      ReversePostOrder.push_back(Block);
      Stack.pop_back();
      continue;
    }
    const CFGBlock *Succ = Next->getReachableBlock();
    ++Next;
    if (Succ && !Seen[Succ->getBlockID()]) {
      Seen[Succ->getBlockID()] = true;
      Stack.push_back({Succ, Succ->succ_begin()});
    }
  }
  std::reverse(ReversePostOrder.begin(), ReversePostOrder.end());
}

void TensorFlowAnalysis::walk(const Stmt *S, bool IsElement,
                              TensorState &State,
                              std::optional<Observer> Visit) const {
  if (!S)
    return;
  // A sub-statement that is a CFG element of its own runs in its block.
  if (!IsElement && Elements.contains(S))
    return;
  // Lambda bodies are analysed as functions of their own.
  if (!isa<LambdaExpr>(S))
    for (const Stmt *Child : S->children())
      walk(Child, /*IsElement=*/false, State, Visit);
  if (Visit)
    (*Visit)(*S, State);
  Model.transfer(*S, State);
}

void TensorFlowAnalysis::runBlock(const CFGBlock &Block, TensorState &State,
                                  std::optional<Observer> Visit) const {
  for (const CFGElement &E : Block) {
    if (auto S = E.getAs<CFGStmt>())
      walk(S->getStmt(), /*IsElement=*/true, State, Visit);
    else if (auto Init = E.getAs<CFGInitializer>())
      Model.initializeMember(*Init->getInitializer(), State);
  }
}

const TensorState *TensorFlowAnalysis::exitState() const {
  const std::optional<TensorState> &Exit =
      BlockEntry[Graph->getExit().getBlockID()];
  return Exit ? &*Exit : nullptr;
}

/// The condition whose value picks between a block's two successors.
static const Expr *branchCondition(const CFGBlock &Block) {
  if (Block.succ_size() != 2)
    return nullptr;
  return dyn_cast_or_null<Expr>(Block.getTerminatorCondition());
}

void TensorFlowAnalysis::solve(unsigned VisitsPerBlock) {
  std::vector<unsigned> Order(Graph->getNumBlockIDs(), 0);
  for (unsigned I = 0; I < ReversePostOrder.size(); ++I)
    Order[ReversePostOrder[I]->getBlockID()] = I;
  // Pending blocks, by reverse post-order position.
  std::set<unsigned> Worklist;
  const CFGBlock &Entry = Graph->getEntry();
  BlockEntry[Entry.getBlockID()] = this->Entry;
  Worklist.insert(Order[Entry.getBlockID()]);

  size_t Budget = static_cast<size_t>(VisitsPerBlock) * ReversePostOrder.size();
  while (!Worklist.empty()) {
    if (Budget-- == 0) {
      reportCap(VisitsPerBlock);
      return; // Converged stays false.
    }
    const CFGBlock *Block = ReversePostOrder[*Worklist.begin()];
    Worklist.erase(Worklist.begin());
    TensorState State = *BlockEntry[Block->getBlockID()];
    runBlock(*Block, State, std::nullopt);

    const Expr *Cond = branchCondition(*Block);
    unsigned SuccIndex = 0;
    for (const CFGBlock::AdjacentBlock &Succ : Block->succs()) {
      unsigned Index = SuccIndex++;
      if (!Succ.isReachable())
        continue;
      const CFGBlock *Next = Succ.getReachableBlock();
      TensorState Out = State;
      if (Cond)
        Model.refineOnBranch(Cond, /*Taken=*/Index == 0, Out);
      std::optional<TensorState> &In = BlockEntry[Next->getBlockID()];
      bool Changed = !In.has_value();
      if (!In)
        In = std::move(Out);
      else
        Changed = In->joinWith(Out);
      if (Changed)
        Worklist.insert(Order[Next->getBlockID()]);
    }
  }
  Converged = true;
}

static std::atomic<TensorFlowAnalysis::CapReporter> CapReport{nullptr};

void TensorFlowAnalysis::setCapReporter(CapReporter Report) {
  CapReport = Report;
}

void TensorFlowAnalysis::reportCap(unsigned VisitsPerBlock) const {
  CapReporter Report = CapReport;
  if (!Report)
    return;
  const SourceManager &SM = Function.getASTContext().getSourceManager();
  PresumedLoc Where =
      SM.getPresumedLoc(SM.getExpansionLoc(Function.getLocation()));
  std::string Name = "a lambda";
  const auto *Method = dyn_cast<CXXMethodDecl>(&Function);
  if (!Method || !Method->getParent()->isLambda())
    if (const auto *ND = dyn_cast<NamedDecl>(&Function))
      Name = "'" + ND->getQualifiedNameAsString() + "'";
  std::string Message = llvm::formatv(
      "{0}:{1}:{2}: the dataflow analysis of {3} stopped after {4} visits per "
      "block without converging; the flow-sensitive checks report nothing "
      "in it",
      Where.isValid() ? Where.getFilename() : "<unknown>",
      Where.isValid() ? Where.getLine() : 0,
      Where.isValid() ? Where.getColumn() : 0, Name, VisitsPerBlock);
  // Each flow-sensitive check runs its own analysis of the same function.
  static std::mutex ReportedMutex;
  static llvm::StringSet<> Reported;
  {
    std::lock_guard<std::mutex> Lock(ReportedMutex);
    if (!Reported.insert(Message).second)
      return;
  }
  Report(Message);
}

void TensorFlowAnalysis::replay(Observer Visit) const {
  for (const CFGBlock *Block : ReversePostOrder) {
    const std::optional<TensorState> &In = BlockEntry[Block->getBlockID()];
    if (!In)
      continue;
    TensorState State = *In;
    runBlock(*Block, State, Visit);
  }
}

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

std::optional<AnalyzedBody>
getAnalyzedBody(const MatchFinder::MatchResult &Result) {
  if (const auto *FD =
          Result.Nodes.getNodeAs<FunctionDecl>("analyzedFunction")) {
    // Lambda bodies are matched as lambdas.
    if (isa<CXXMethodDecl>(FD) && cast<CXXMethodDecl>(FD)->getParent()->isLambda())
      return std::nullopt;
    return AnalyzedBody{FD, FD->getBody()};
  }
  if (const auto *L = Result.Nodes.getNodeAs<LambdaExpr>("analyzedLambda")) {
    const CXXMethodDecl *Op = L->getCallOperator();
    if (!Op || !L->getBody())
      return std::nullopt;
    return AnalyzedBody{Op, L->getBody()};
  }
  return std::nullopt;
}

} // namespace clang::tidy::torch
