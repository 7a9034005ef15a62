//===--- AutocastRegionCheck.h - torch-tidy ---------------------*- C++ -*-===//

#ifndef TORCH_TIDY_AUTOCASTREGIONCHECK_H
#define TORCH_TIDY_AUTOCASTREGIONCHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags an autocast region left open by an early return or a throw, a
/// backward() inside an autocast region, and a float16 region's loss that
/// reaches backward() with no loss scaling.
///
/// For the user-facing documentation see:
/// docs/checks/torch-autocast-region.md
class AutocastRegionCheck : public ModelCheck {
public:
  AutocastRegionCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void report(const Violation &V, ProgramModel &Program) override;
  const StringRef RawAutocastGuardTypes;
  const StringRef RawBackwardFunctions;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_AUTOCASTREGIONCHECK_H
