//===--- DeviceIndexUncheckedCheck.h - torch-tidy ---------------*- C++ -*-===//

#ifndef TORCH_TIDY_DEVICEINDEXUNCHECKEDCHECK_H
#define TORCH_TIDY_DEVICEINDEXUNCHECKEDCHECK_H

#include "ModelCheck.h"

namespace clang::tidy::torch {

/// Flags a hard-coded CUDA ordinal above 0 (`torch::Device(torch::kCUDA, 1)`,
/// `"cuda:3"`) that no `device_count()` comparison on its path (or on some
/// caller's path) proves to exist.
///
/// For the user-facing documentation see:
/// docs/checks/torch-device-index-unchecked.md
class DeviceIndexUncheckedCheck : public ModelCheck {
public:
  DeviceIndexUncheckedCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;

private:
  void report(const Violation &V, ProgramModel &Program) override;
  const StringRef ExtraDeviceCountFunctions;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_DEVICEINDEXUNCHECKEDCHECK_H
