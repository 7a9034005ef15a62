//===--- NonBlockingPageableCheck.h - torch-tidy ----------------*- C++ -*-===//

#ifndef TORCH_TIDY_NONBLOCKINGPAGEABLECHECK_H
#define TORCH_TIDY_NONBLOCKINGPAGEABLECHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags a non_blocking host-to-device copy whose source is proven to be
/// pageable CPU memory and whose destination may be CUDA.
///
/// For the user-facing documentation see:
/// docs/checks/torch-non-blocking-pageable.md
class NonBlockingPageableCheck : public ModelCheck {
public:
  NonBlockingPageableCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void report(const Violation &V, ProgramModel &Program) override;
  const StringRef RawExtraPinnedAllocators;
  const StringRef RawExtraFactories;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_NONBLOCKINGPAGEABLECHECK_H
