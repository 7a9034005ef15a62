//===--- Autocast.h - torch-tidy --------------------------------*- C++ -*-===//
//
// LibTorch's autocast switches, thread-wide state: 1.13's CUDA-only
// `at::autocast::set_enabled(bool)` / `set_autocast_gpu_dtype(dtype)` and
// the per-backend `set_cpu_enabled` ..., 2.x's
// `set_autocast_enabled(device_type, bool)` / `set_autocast_dtype(...)`.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_API_AUTOCAST_H
#define TORCH_TIDY_API_AUTOCAST_H

#include "TorchApi.h"
#include "clang/AST/Expr.h"

namespace clang::tidy::torch {

/// A call that switches autocast or sets its dtype.
struct AutocastSwitch {
  enum Kind { None, Enable, Dtype } What = None;
  /// The device type it applies to; null for the CUDA-only 1.13 spellings
  /// (`set_enabled`, `set_autocast_gpu_dtype`).
  const Expr *DeviceType = nullptr;
  /// The backend a 1.13 per-backend spelling names (`set_cpu_enabled`:
  /// "cpu"); empty otherwise.
  llvm::StringRef Backend;
  /// The bool (Enable) or the ScalarType (Dtype) it sets.
  const Expr *Value = nullptr;
};

/// What \p Call does to autocast; What is None for any other call.
AutocastSwitch autocastSwitch(const CallExpr &Call);

/// `is_enabled()`, `is_autocast_enabled(device_type)`, `is_cpu_enabled()`:
/// the state a guard saves to restore it.
bool isAutocastQuery(const CallExpr &Call);

/// A variable of one of \p Opts.AutocastGuardTypes: autocast is on for its
/// scope.
bool isAutocastGuard(const VarDecl &VD, const TorchApiOptions &Opts);

/// Whether the dtype \p E names is float16 (`at::kHalf`, `torch::kFloat16`);
/// nullopt when it is not a constant.
std::optional<bool> namesHalf(const Expr *E);

/// Whether \p Value, a value of the dtype enum \p T, is float16; nullopt
/// when \p T is no dtype or no enumerator has that value.
std::optional<bool> dtypeValueIsHalf(QualType T, int64_t Value);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_API_AUTOCAST_H
