//===--- InferenceWithoutNoGradCheck.h - torch-tidy -------------*- C++ -*-===//

#ifndef TORCH_TIDY_INFERENCEWITHOUTNOGRADCHECK_H
#define TORCH_TIDY_INFERENCEWITHOUTNOGRADCHECK_H

#include "ModelCheck.h"
#include <memory>

namespace clang::tidy::torch {

class GradModeOracle;

/// Flags a module forward inside a loop that never runs backward() (nor an
/// optimizer step) while autograd is provably recording: no NoGradGuard,
/// InferenceMode or AutoGradMode(false) in scope, in an enclosing lambda's
/// scope, or around any call of the enclosing function.
///
/// For the user-facing documentation see:
/// docs/checks/torch-inference-without-no-grad.md
class InferenceWithoutNoGradCheck : public ModelCheck {
public:
  InferenceWithoutNoGradCheck(StringRef Name, ClangTidyContext *Context);
  ~InferenceWithoutNoGradCheck() override;
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void onStartOfTranslationUnit() override;

private:
  void checkBody(const FunctionDecl &Function,
                 const TensorFlowAnalysis &Analysis,
                 ProgramModel &Program) override;
  void checkModuleCall(const CallExpr &Call, ProgramModel &Program);

  const StringRef RawBackwardFunctions;
  const StringRef RawGuardTypes;
  std::vector<std::string> GuardTypes;
  std::unique_ptr<GradModeOracle> Oracle;
  const ProgramModel *OracleProgram = nullptr;
  /// Loops already reported: one warning per loop.
  llvm::DenseSet<const Stmt *> ReportedLoops;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_INFERENCEWITHOUTNOGRADCHECK_H
