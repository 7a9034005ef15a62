//===--- CudaUnguardedCheck.h - torch-tidy ----------------------*- C++ -*-===//

#ifndef TORCH_TIDY_CUDAUNGUARDEDCHECK_H
#define TORCH_TIDY_CUDAUNGUARDEDCHECK_H

#include "model/CudaAvailabilityGuard.h"
#include "clang-tidy/ClangTidyCheck.h"
#include "model/UserCodeTraversal.h"

namespace clang::tidy::torch {

/// Flags an expression that selects a CUDA device (`torch::kCUDA` used as a
/// device, `"cuda"`/`"cuda:N"` device strings, `.cuda()`) that can run on a
/// machine without CUDA: no `torch::cuda::is_available()` /
/// `device_count()` check guards it and no CPU fallback exists. The guard
/// analysis lives in analysis/CudaAvailabilityGuard.h; this class only
/// reports its findings.
///
/// For the user-facing documentation see:
/// docs/checks/torch-cuda-unguarded.md
class CudaUnguardedCheck : public ClangTidyCheck {
public:
  CudaUnguardedCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void registerMatchers(ast_matchers::MatchFinder *Finder) override;
  void check(const ast_matchers::MatchFinder::MatchResult &Result) override;
  bool isLanguageVersionSupported(const LangOptions &LangOpts) const override {
    return LangOpts.CPlusPlus;
  }

private:
  UserCodeTraversal UserCode;
  /// Project functions that, like is_available(), are false without CUDA.
  const StringRef GuardFunctions;
  /// Project functions that choose the device themselves (with a fallback).
  const StringRef DeviceSelectorFunctions;
  CudaGuardOptions GuardOptions;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_CUDAUNGUARDEDCHECK_H
