//===--- HostSyncInLoopCheck.h - torch-tidy ---------------------*- C++ -*-===//

#ifndef TORCH_TIDY_HOSTSYNCINLOOPCHECK_H
#define TORCH_TIDY_HOSTSYNCINLOOPCHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags a host-device synchronisation (`.item()`, `.cpu()`,
/// `.to(torch::kCPU)`, printing a tensor, `torch::cuda::synchronize()`) that
/// runs on every iteration of a training loop, on a tensor the flow analysis
/// proves to be, or possibly be, on CUDA.
///
/// For the user-facing documentation see:
/// docs/checks/torch-host-sync-in-loop.md
class HostSyncInLoopCheck : public ModelCheck {
public:
  HostSyncInLoopCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void checkBody(const FunctionDecl &Function,
                 const TensorFlowAnalysis &Analysis,
                 ProgramModel &Program) override;
  const StringRef RawTrainingStepFunctions;
  const StringRef RawExtraSyncFunctions;
  /// How many enclosing loops, innermost first, are searched for the
  /// training loop.
  const unsigned MaxLoopDepth;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_HOSTSYNCINLOOPCHECK_H
