//===--- HostSyncInLoopCheck.h - torch-tidy ---------------------*- C++ -*-===//

#ifndef TORCH_TIDY_HOSTSYNCINLOOPCHECK_H
#define TORCH_TIDY_HOSTSYNCINLOOPCHECK_H

#include "analysis/TorchApi.h"
#include "clang-tidy/ClangTidyCheck.h"
#include "utils/TrainingLoop.h"
#include "utils/UserCodeTraversal.h"

namespace clang::tidy::torch {

/// Flags a host-device synchronisation (`.item()`, `.cpu()`,
/// `.to(torch::kCPU)`, printing a tensor, `torch::cuda::synchronize()`) that
/// runs on every iteration of a training loop, on a tensor the flow analysis
/// proves to be, or possibly be, on CUDA.
///
/// For the user-facing documentation see:
/// docs/checks/torch-host-sync-in-loop.md
class HostSyncInLoopCheck : public ClangTidyCheck {
public:
  HostSyncInLoopCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void registerMatchers(ast_matchers::MatchFinder *Finder) override;
  void check(const ast_matchers::MatchFinder::MatchResult &Result) override;
  bool isLanguageVersionSupported(const LangOptions &LangOpts) const override {
    return LangOpts.CPlusPlus;
  }

private:
  UserCodeTraversal UserCode;
  const StringRef RawTrainingStepFunctions;
  const StringRef RawExtraSyncFunctions;
  /// How many enclosing loops, innermost first, are searched for the
  /// training loop.
  const unsigned MaxLoopDepth;
  /// TrainingStepFunctions go to ExtraStepFunctions.
  TrainingLoopOptions LoopOptions;
  TorchApiOptions ApiOptions;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_HOSTSYNCINLOOPCHECK_H
