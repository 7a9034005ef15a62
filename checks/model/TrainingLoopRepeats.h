//===--- TrainingLoopRepeats.h - torch-tidy ---------------------*- C++ -*-===//
//
// The training loop that runs a statement on every one of its iterations:
// one of the innermost loops around it (up to a depth) is a training loop,
// whose body calls backward(), an optimizer's step(), a project's training
// step or a helper whose summary runs one (outside nested loops and
// lambdas), and nothing between the statement and that loop makes it
// conditional: no if/switch/?:/&&/||/catch, no lambda or function boundary,
// no `continue` before it, no goto in the loop.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_ANALYSIS_TRAININGLOOPREPEATS_H
#define TORCH_TIDY_ANALYSIS_TRAININGLOOPREPEATS_H

#include "clang/AST/Expr.h"
#include "llvm/ADT/DenseMap.h"

namespace clang::tidy::torch {

class ProgramModel;

class TrainingLoopRepeats {
public:
  struct Loop {
    const Stmt *Statement = nullptr;
    /// The call that makes it a training loop, for the note.
    const CallExpr *StepCall = nullptr;
  };

  TrainingLoopRepeats(ProgramModel &Program, unsigned MaxLoopDepth)
      : Program(Program), MaxLoopDepth(MaxLoopDepth) {}

  /// The training loop that runs \p S on each of its iterations, if any.
  Loop at(const Stmt &S);

private:
  const CallExpr *stepCall(const Stmt &Loop);

  ProgramModel &Program;
  unsigned MaxLoopDepth;
  llvm::DenseMap<const Stmt *, const CallExpr *> StepCalls;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_ANALYSIS_TRAININGLOOPREPEATS_H
