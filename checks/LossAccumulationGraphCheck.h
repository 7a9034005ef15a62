//===--- LossAccumulationGraphCheck.h - torch-tidy --------------*- C++ -*-===//

#ifndef TORCH_TIDY_LOSSACCUMULATIONGRAPHCHECK_H
#define TORCH_TIDY_LOSSACCUMULATIONGRAPHCHECK_H

#include "ModelCheck.h"
#include <memory>

namespace clang::tidy::torch {

class GradModeOracle;

/// Flags a tensor that the flow analysis proves to be attached to an
/// autograd graph (a module output, a loss, arithmetic on them, a value
/// that reaches backward(), outside any no-grad guard) accumulated into
/// storage that outlives the loop iteration: `total += loss`,
/// `total = total + loss`, `losses.push_back(loss)`
/// (analysis/LossAccumulation.h).
///
/// For the user-facing documentation see:
/// docs/checks/torch-loss-accumulation-graph.md
class LossAccumulationGraphCheck : public ModelCheck {
public:
  LossAccumulationGraphCheck(StringRef Name, ClangTidyContext *Context);
  ~LossAccumulationGraphCheck() override;
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void onStartOfTranslationUnit() override;

private:
  void checkBody(const FunctionDecl &Function,
                 const TensorFlowAnalysis &Analysis,
                 ProgramModel &Program) override;

  const StringRef RawBackwardFunctions;
  const StringRef RawAccumulatingFunctions;
  const StringRef RawGuardTypes;
  std::vector<std::string> AccumulatingFunctions;
  std::vector<std::string> GuardTypes;
  std::unique_ptr<GradModeOracle> Oracle;
  const ProgramModel *OracleProgram = nullptr;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_LOSSACCUMULATIONGRAPHCHECK_H
