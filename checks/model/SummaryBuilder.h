//===--- SummaryBuilder.h - torch-tidy --------------------------*- C++ -*-===//
//
// Reads a function's converged analysis into its FunctionSummary, and reads
// a callee's requirements back at one of its calls.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_ANALYSIS_SUMMARYBUILDER_H
#define TORCH_TIDY_ANALYSIS_SUMMARYBUILDER_H

#include "FunctionSummary.h"
#include "clang/AST/Expr.h"
#include "llvm/ADT/SmallVector.h"

namespace clang::tidy::torch {

class ProgramModel;
class TensorFlowAnalysis;
class TensorModel;
class TensorState;

FunctionSummary buildSummary(const FunctionDecl &Function,
                             const TensorFlowAnalysis &Analysis,
                             ProgramModel &Program);

/// One operand of a requirement as the caller sees it.
struct InstantiatedOperand {
  ValueFacts Facts;
  /// The argument that stands for it, when it is one of the callee's
  /// parameters; null when the callee established it itself.
  const Expr *Argument = nullptr;
  std::string Name;
};

/// A requirement of the callee, at one call.
struct InstantiatedRequirement {
  const Requirement *Req = nullptr;
  InstantiatedOperand First, Second;
};

/// The requirements of \p Call's callee, in the caller's terms in state
/// \p S; empty when the callee has no summary.
llvm::SmallVector<InstantiatedRequirement, 2>
requirementsAt(const CallExpr &Call, const TensorModel &Model,
               const TensorState &S);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_ANALYSIS_SUMMARYBUILDER_H
