//===--- FlowAnalysis.h - torch-tidy ----------------------------*- C++ -*-===//
//
// The one dataflow engine: a forward worklist analysis over clang's CFG of
// one function (or lambda body) with FlowModel's transfer functions, and the
// loop structure of that CFG (which statements run on every iteration of
// which loop, which loops train, which statements run on every call). Checks
// replay the converged states; this file knows nothing of warnings.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_FLOWANALYSIS_H
#define TORCH_TIDY_MODEL_FLOWANALYSIS_H

#include "FlowModel.h"
#include "Requirement.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Analysis/CFG.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include <memory>
#include <optional>
#include <vector>

namespace clang::tidy::torch {

class ProgramModel;

/// Whether the loop \p S runs its body at least once whenever it is
/// reached, by its form alone (FlowLoops.cpp).
bool runsAtLeastOnce(const Stmt *S, const ASTContext &Ctx);

class FlowAnalysis {
public:
  /// Block visits allowed per CFG block before the analysis gives up.
  static constexpr unsigned DefaultVisitsPerBlock = 16;

  /// Analyses the body of \p Function from \p Entry. Returns nothing when no
  /// CFG can be built for it.
  static std::unique_ptr<FlowAnalysis>
  run(const FunctionDecl &Function, ProgramModel &Program, State Entry,
      unsigned VisitsPerBlock = DefaultVisitsPerBlock);
  /// Analyses the initialiser of a global, as it runs before main.
  static std::unique_ptr<FlowAnalysis> runInitializer(const VarDecl &Global,
                                                      ProgramModel &Program,
                                                      State Entry);

  /// False when the iteration cap stopped the analysis before a fixpoint;
  /// the states are then not sound and checks must not report.
  bool converged() const { return Converged; }

  /// Receives a one-line message (location, function, cap) when an analysis
  /// stops at the iteration cap, once per function and process. The driver
  /// prints it as a note; by default nothing is said. Thread-safe; set it
  /// before analysing.
  using CapReporter = void (*)(llvm::StringRef Message);
  static void setCapReporter(CapReporter Report);
  /// Says that the code of \p File ran out of its budget of \p Budget
  /// function analyses.
  static void reportBudget(const ASTContext &Ctx, FileID File,
                           unsigned Budget);

  using Observer =
      llvm::function_ref<void(const Stmt &S, const State &Before)>;
  /// Visits every statement of every reachable block once, in evaluation
  /// order (children before parents), with the state just before it runs.
  void replay(Observer Visit) const;
  void dump(llvm::raw_ostream &OS) const;
  /// The state just before \p S runs; null when \p S is not reached.
  std::optional<State> stateBefore(const Stmt &S) const;
  /// The state where the scope of local \p Var ends and its destructor
  /// runs, joined over every way out of the scope; null when none is
  /// reached.
  std::optional<State> stateAtDestruction(const VarDecl &Var) const;

  const FlowModel &model() const { return Model; }
  /// The function analysed (null for a global's initialiser).
  const FunctionDecl *function() const { return Function; }
  const Decl &owner() const { return Owner; }
  const State &entryState() const { return Entry; }
  /// Where the function returns normally (a `throw` out of it is not a
  /// return); null when it never does.
  const State *exitState() const;
  /// The states where the function ends without returning to the exit
  /// block's predecessor chain (a noreturn call, a throw), and the exit.
  std::vector<State> endStates() const;

  //===--- Loops -----------------------------------------------------------===//

  /// Where \p S runs relative to this function's loops.
  LoopContext loopContext(const Stmt &S) const;
  /// Whether \p S runs on every call of the function.
  bool runsOnEveryCall(const Stmt &S) const;
  /// Of the statements \p Left that left something pending (an optimizer
  /// step with no reset after it), those whose leftover may meet \p Site on
  /// a later iteration: a loop of this function runs both, or its callers
  /// run it in one. (Two trainers fitted one after the other share none.)
  llvm::SmallVector<std::pair<const Stmt *, SourceLocation>, 2>
  leftForLaterIteration(
      const Stmt &Site,
      llvm::ArrayRef<std::pair<const Stmt *, SourceLocation>> Left) const;
  /// The largest device count that a comparison of this function with a
  /// constant proves on some path, and the comparison.
  std::pair<int64_t, const Expr *> largestCountProven() const;

private:
  FlowAnalysis(const Decl &Owner, ProgramModel &Program,
               std::unique_ptr<CFG> Graph, State Entry);
  void computeReversePostOrder();
  void solve(unsigned VisitsPerBlock);
  void reportCap(unsigned VisitsPerBlock) const;
  /// Runs \p Block's elements on \p St. With \p Thrown, joins into it the
  /// state before each element of a try block, and after the last one:
  /// where an exception may leave the block.
  using DestructionObserver =
      llvm::function_ref<void(const VarDecl &Var, const State &Before)>;
  void runBlock(const CFGBlock &Block, State &St,
                std::optional<Observer> Visit,
                std::optional<State> *Thrown = nullptr,
                DestructionObserver OnDestroy = nullptr) const;
  void walk(const Stmt *S, bool IsElement, State &St,
            std::optional<Observer> Visit) const;
  const Expr *branchCondition(const CFGBlock &Block) const;
  /// The successors of \p Block that state \p St may take: all of them,
  /// but those of a branch or a switch on a value \p St knows.
  llvm::BitVector feasibleSuccessors(const CFGBlock &Block, const Expr *Cond,
                                     const State &St) const;
  /// What the edge of \p Block taken when \p Cond is \p Taken proves.
  void refineOnEdge(const CFGBlock &Block, const Expr *Cond, bool Taken,
                    State &St) const;
  /// The state leaving a range-for through its condition: the elements of
  /// the container it walks hold what the body left in each. False while no
  /// back edge has a state and \p NoIteration is not allowed yet.
  bool leaveRangeFor(const CXXForRangeStmt &Loop, const CFGBlock &Condition,
                     llvm::ArrayRef<unsigned> Order, bool NoIteration,
                     State &Out) const;
  /// The state leaving a counting loop between constants through its
  /// condition: what comes around its back edges (it ran at least once).
  /// False while no back edge has a state and \p NoIteration is not
  /// allowed yet.
  bool leaveLoopSureToRun(const ForStmt &Loop, const CFGBlock &Condition,
                          llvm::ArrayRef<unsigned> Order, bool NoIteration,
                          State &Out) const;

  struct Loop {
    const CFGBlock *Header = nullptr;
    llvm::BitVector Blocks;
    llvm::SmallVector<const CFGBlock *, 2> Latches;
    const Stmt *Statement = nullptr;
    /// The first backward()/step() that its own blocks (not those of loops
    /// nested in it) run; null when none.
    const Expr *TrainingCall = nullptr;
    /// No backward() or step() runs in it, even through an opaque call.
    bool WithoutBackward = false;
  };
  void computeLoops() const;
  const CFGBlock *blockOf(const Stmt &S) const;
  bool dominates(const CFGBlock &A, const CFGBlock &B) const;
  /// Whether block \p Inner runs on every iteration of \p L that runs its
  /// training call: before the call, or on every path from it to a latch.
  bool runsWithTraining(const Loop &L, const CFGBlock &Inner) const;

  const Decl &Owner;
  const FunctionDecl *Function;
  ProgramModel &Program;
  FlowModel Model;
  std::unique_ptr<CFG> Graph;
  State Entry;
  /// Statements that are CFG elements in their own right.
  llvm::DenseSet<const Stmt *> Elements;
  /// The block each statement (and sub-statement) runs in.
  llvm::DenseMap<const Stmt *, const CFGBlock *> BlockOfStmt;
  /// Exceptions: the try-dispatch blocks that each block (by ID) may throw
  /// to, as it runs a statement of their try block, and the reverse. clang's
  /// CFG leaves those edges out unless every call outside a try also gets
  /// one to the exit.
  std::vector<llvm::SmallVector<const CFGBlock *, 1>> ThrowsTo, ThrownFrom;
  /// The elements that run inside a try block, which may throw.
  llvm::DenseSet<const Stmt *> MayThrow;
  void computeThrowEdges();
  /// Entry states, indexed by block ID; nullopt for unreached blocks.
  std::vector<std::optional<State>> BlockEntry;
  std::vector<const CFGBlock *> ReversePostOrder;
  bool Converged = false;

  mutable bool LoopsComputed = false;
  mutable std::vector<llvm::BitVector> Dominators;
  mutable std::vector<Loop> Loops;
};

/// What every flow-sensitive check matches: function definitions and lambda
/// bodies in user code (not system headers), template instantiations
/// included.
void registerAnalyzedBodyMatchers(ast_matchers::MatchFinder &Finder,
                                  ast_matchers::MatchFinder::MatchCallback &CB);

/// The function a match of those matchers names: a function, an
/// instantiation or a lambda's call operator.
const FunctionDecl *
getAnalyzedFunction(const ast_matchers::MatchFinder::MatchResult &Result);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_FLOWANALYSIS_H
