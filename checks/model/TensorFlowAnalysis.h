//===--- TensorFlowAnalysis.h - torch-tidy ----------------------*- C++ -*-===//
//
// A forward dataflow analysis over clang's CFG of one function (or lambda
// body) that tracks, for every tensor, module, device, options and bool
// value: its device, its pinning, its autograd graph, and pending
// non-blocking device-to-host copies. The checks replay the converged
// states and report what they prove; this file knows nothing of warnings.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_ANALYSIS_TENSORFLOWANALYSIS_H
#define TORCH_TIDY_ANALYSIS_TENSORFLOWANALYSIS_H

#include "TensorModel.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Analysis/CFG.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include <memory>
#include <optional>
#include <vector>

namespace clang::tidy::torch {

class ProgramModel;

class TensorFlowAnalysis {
public:
  /// Block visits allowed per CFG block before the analysis gives up.
  static constexpr unsigned DefaultVisitsPerBlock = 16;

  /// Analyses \p Body of \p Function, starting from \p Entry (nothing known
  /// when null). With \p Program, calls of user functions use their
  /// summaries; without, they are opaque. Returns nothing when no CFG can be
  /// built for it.
  static std::unique_ptr<TensorFlowAnalysis>
  run(const Decl &Function, const Stmt &Body, ASTContext &Ctx,
      const TorchApiOptions &Opts,
      unsigned VisitsPerBlock = DefaultVisitsPerBlock,
      ProgramModel *Program = nullptr, const TensorState *Entry = nullptr);

  /// False when the iteration cap stopped the analysis before a fixpoint;
  /// the states are then not sound and checks must not report.
  bool converged() const { return Converged; }

  /// Receives a one-line message (location, function, cap) when an analysis
  /// stops at the iteration cap, once per function and process: several
  /// checks analyse the same function. The driver prints it as a note; by
  /// default nothing is said. Thread-safe; set it before analysing.
  using CapReporter = void (*)(llvm::StringRef Message);
  static void setCapReporter(CapReporter Report);

  using Observer =
      llvm::function_ref<void(const Stmt &S, const TensorState &Before)>;
  /// Visits every statement of every reachable block once, in evaluation
  /// order (children before parents), with the state just before it runs.
  void replay(Observer Visit) const;

  const TensorModel &model() const { return Model; }
  const Decl &function() const { return Function; }
  /// The state at entry, and where the function returns normally (null
  /// when it never does).
  const TensorState &entryState() const { return Entry; }
  const TensorState *exitState() const;

private:
  TensorFlowAnalysis(const Decl &Function, const Stmt &Body, ASTContext &Ctx,
                     const TorchApiOptions &Opts, std::unique_ptr<CFG> Graph,
                     ProgramModel *Program, TensorState Entry);
  void computeReversePostOrder();
  void solve(unsigned VisitsPerBlock);
  void reportCap(unsigned VisitsPerBlock) const;
  void runBlock(const CFGBlock &Block, TensorState &State,
                std::optional<Observer> Visit) const;
  void walk(const Stmt *S, bool IsElement, TensorState &State,
            std::optional<Observer> Visit) const;

  const Decl &Function;
  TensorModel Model;
  std::unique_ptr<CFG> Graph;
  TensorState Entry;
  /// Statements that are CFG elements in their own right.
  llvm::DenseSet<const Stmt *> Elements;
  /// Entry states, indexed by block ID; nullopt for unreached blocks.
  std::vector<std::optional<TensorState>> BlockEntry;
  std::vector<const CFGBlock *> ReversePostOrder;
  bool Converged = false;
};

/// What every flow-sensitive check matches: function definitions and lambda
/// bodies in user code (not system headers), template instantiations
/// included.
void registerAnalyzedBodyMatchers(ast_matchers::MatchFinder &Finder,
                                  ast_matchers::MatchFinder::MatchCallback &CB);

/// The declaration and body a match of those matchers names.
struct AnalyzedBody {
  /// A function, an instantiation or a lambda's call operator.
  const FunctionDecl *Function = nullptr;
  const Stmt *Body = nullptr;
};
std::optional<AnalyzedBody>
getAnalyzedBody(const ast_matchers::MatchFinder::MatchResult &Result);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_ANALYSIS_TENSORFLOWANALYSIS_H
