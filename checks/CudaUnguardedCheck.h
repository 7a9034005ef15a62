//===--- CudaUnguardedCheck.h - torch-tidy ----------------------*- C++ -*-===//

#ifndef TORCH_TIDY_CUDAUNGUARDEDCHECK_H
#define TORCH_TIDY_CUDAUNGUARDEDCHECK_H

#include "ModelCheck.h"
#include <map>

namespace clang::tidy::torch {

/// Flags an expression that selects a CUDA device (`torch::kCUDA` used as a
/// device, `"cuda"`/`"cuda:N"` device strings, `.cuda()`) on a path where
/// no `torch::cuda::is_available()` / `device_count()` check ran and no CPU
/// fallback exists: the engine keeps "CUDA checked" as a path fact and the
/// unchecked selections of each path; this class reports each unguarded path
/// once, at its first use.
///
/// For the user-facing documentation see:
/// docs/checks/torch-cuda-unguarded.md
class CudaUnguardedCheck : public ModelCheck {
public:
  CudaUnguardedCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void onEndOfTranslationUnit() override;

private:
  void checkFunction(const Decl &Owner, ProgramModel &Program) override;

  struct Use {
    const Expr *Selection = nullptr;
    /// Where the path reaches it in its root: the call from the root, or
    /// the use itself.
    SourceLocation Anchor;
    /// The first call into the use's function that checks nothing.
    const Expr *UncheckedCall = nullptr;
    /// An availability check in the use's function that does not protect
    /// it.
    const Expr *UselessCheck = nullptr;
  };
  /// The unguarded uses of each path, by the declaration it starts at.
  std::map<unsigned, std::vector<Use>> Paths;
  ProgramModel *Program = nullptr;

  const StringRef GuardFunctions;
  const StringRef DeviceSelectorFunctions;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_CUDAUNGUARDEDCHECK_H
