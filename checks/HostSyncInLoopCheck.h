//===--- HostSyncInLoopCheck.h - torch-tidy ---------------------*- C++ -*-===//

#ifndef TORCH_TIDY_HOSTSYNCINLOOPCHECK_H
#define TORCH_TIDY_HOSTSYNCINLOOPCHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags a host-device synchronisation that runs on every iteration of a
/// training loop.
///
/// For the user-facing documentation see:
/// docs/checks/torch-host-sync-in-loop.md
class HostSyncInLoopCheck : public ModelCheck {
public:
  HostSyncInLoopCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void report(const Violation &V, ProgramModel &Program) override;
  const StringRef RawTrainingStepFunctions;
  const StringRef RawExtraSyncFunctions;
  const unsigned MaxLoopDepth;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_HOSTSYNCINLOOPCHECK_H
