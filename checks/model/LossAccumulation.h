//===--- LossAccumulation.h - torch-tidy ------------------------*- C++ -*-===//
//
// Accumulations that keep every iteration's autograd graph alive: a tensor
// the flow analysis proves to be on a graph (a module output, a loss, a
// value that reaches backward()), added to storage that outlives the loop
// iteration (`total += loss`, `total = total + loss`, `losses.push_back(loss)`)
// where autograd records, with no reset of the accumulator in the loop and
// no backward() through it. Outside a training loop, an accumulator that
// leaves the function (returned, directly or through values computed from
// it) is the caller's business: a loss function summing per-head terms.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_ANALYSIS_LOSSACCUMULATION_H
#define TORCH_TIDY_ANALYSIS_LOSSACCUMULATION_H

#include "TensorFacts.h"
#include "model/TrainingLoop.h"
#include "clang/AST/Stmt.h"
#include <string>
#include <vector>

namespace clang::tidy::torch {

class GradModeOracle;
class ProgramModel;
class TensorFlowAnalysis;

/// One accumulation: `Acc op= Value`, `Acc = Acc + Value`,
/// `Acc.push_back(Value)`, or a call of one of the AccumulatingFunctions.
struct Accumulation {
  enum KindType { Add, Append, Store } Kind = Add;
  const Expr *Acc = nullptr;
  const Expr *Value = nullptr;
  llvm::StringRef Method;
};
bool matchAccumulation(const Stmt &S,
                       const std::vector<std::string> &AccumulatingFunctions,
                       Accumulation &Out);

/// An accumulation that keeps a graph alive across iterations.
struct GraphAccumulation {
  const Stmt *At = nullptr;
  Accumulation A;
  /// Where the value joins the graph.
  Sourced<GraphState> Graph;
  /// The accumulator's storage (a local outside the loop, a member, ...).
  StorageRoot Root;
};

/// The accumulations of \p Analysis's function that keep graphs alive; \p
/// GradMode says where autograd records.
std::vector<GraphAccumulation>
findGraphAccumulations(const TensorFlowAnalysis &Analysis,
                       ProgramModel &Program, GradModeOracle &GradMode,
                       const std::vector<std::string> &AccumulatingFunctions);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_ANALYSIS_LOSSACCUMULATION_H
