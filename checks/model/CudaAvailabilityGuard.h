//===--- CudaAvailabilityGuard.h - torch-tidy -------------------*- C++ -*-===//
//
// The model behind torch-cuda-unguarded: does a program point run on a
// machine where CUDA is not available?
//
// The question is answered by abstract interpretation of "the world without
// CUDA": over each function's CFG, a forward worklist analysis in which
// torch::cuda::is_available() (and the other availability queries) evaluate to
// false, device_count() to 0, and every branch whose condition is then known
// is followed only one way. Scalar locals initialised from, or assigned,
// such values are tracked through the CFG, so that `bool has_cuda =
// is_available(); if (has_cuda) ...` and `if (!has_cuda) return;` are
// understood. A statement that stays reachable in that world is unguarded
// within its function; it is guarded when the function's entry itself is only
// reached under a guard: every call site of the function in the translation
// unit (at least one) is guarded, recursively, and likewise for lambdas
// (where they are defined or called) and for member initialisers (where the
// class is constructed).
//
// The checks report what this proves; they never pattern-match guards.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_ANALYSIS_CUDAAVAILABILITYGUARD_H
#define TORCH_TIDY_ANALYSIS_CUDAAVAILABILITYGUARD_H

#include "clang/AST/ASTContext.h"
#include "clang/AST/ParentMap.h"
#include "clang/AST/Expr.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringRef.h"
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace clang::tidy::torch {

/// Project-specific additions from the check's options.
struct CudaGuardOptions {
  /// Names are fully qualified, without a leading "::" (`myproj::has_gpu`).
  /// Fully qualified functions that, like torch::cuda::is_available(),
  /// return false (or 0) when CUDA is not available.
  std::vector<std::string> GuardFunctions;
  /// Fully qualified functions that pick a device themselves and fall back to
  /// the CPU: a CUDA device passed to them as a preference is no selection,
  /// and the code in their bodies counts as guarded.
  std::vector<std::string> DeviceSelectorFunctions;
};

/// What device a device literal (`torch::kCUDA`, `"cuda:0"`, `kCPU`, `"cpu"`)
/// names.
enum class DeviceLiteralKind { None, CUDA, CPU };

/// The device named by \p E when it is a reference to `c10::kCUDA`/`kCPU` (any
/// alias of them) or to the enumerators `c10::DeviceType::CUDA`/`CPU`, or a
/// device string literal `"cuda"`, `"cuda:N"`, `"cpu"`.
DeviceLiteralKind classifyDeviceLiteral(const Expr &E);

/// How a device literal is consumed.
enum class DeviceLiteralUse {
  /// Not to select a device: compared, stored as a plain DeviceType, ...
  Other,
  /// Converted to a c10::Device / TensorOptions, or passed to `.to()`,
  /// `TensorOptions::device()`, `torch::device()`: a device selection.
  Selection,
  /// A preference passed to one of the DeviceSelectorFunctions.
  SelectorArgument,
};
/// Classifies the consumer of \p Literal; \p PM is a parent map of the code
/// that contains it.
DeviceLiteralUse classifyDeviceLiteralUse(const Expr &Literal,
                                          const ParentMap &PM,
                                          const CudaGuardOptions &Opts);

/// `t.cuda()` on an at::Tensor.
bool isTensorCudaCall(const Expr &E);
/// `t.cpu()` on an at::Tensor.
bool isTensorCpuCall(const Expr &E);

/// The guard analysis of one translation unit. It walks the user code of the
/// TU once (declarations in system headers are skipped), recording every
/// CUDA selection and every reference to a function, variable or class,
/// each with the code that contains it; it never builds the TU-wide parent
/// map. CFGs are built only for the functions it has to look at, and cached.
/// The object must not outlive the ASTContext.
class ProgramModel;

class CudaAvailabilityGuard {
public:
  /// With \p Program, a function that the whole program (an earlier audit)
  /// only calls where CUDA is available has a guarded entry.
  CudaAvailabilityGuard(ASTContext &Ctx, CudaGuardOptions Opts,
                        ProgramModel *Program = nullptr);
  ~CudaAvailabilityGuard();
  CudaAvailabilityGuard(const CudaAvailabilityGuard &) = delete;
  CudaAvailabilityGuard &operator=(const CudaAvailabilityGuard &) = delete;

  /// A CUDA selection that can run without CUDA.
  struct Finding {
    /// The selecting expression: the literal, or the `.cuda()` call.
    const Expr *Use = nullptr;
    /// Where to report it: the literal, or the name `cuda`.
    SourceLocation Loc;
    /// An availability check in the same function that does not protect the
    /// use; null when there is none.
    const Expr *NonDominatingGuard = nullptr;
    /// When the use's function would be guarded by its callers (or its class
    /// by where it is constructed, a lambda by where it is called), the first
    /// such place that is not guarded; null otherwise.
    const Expr *UnguardedCallSite = nullptr;
    /// The code whose entry the unguarded path starts at (a function, a
    /// lambda, an initialiser): findings with one root are one path.
    const void *Root = nullptr;
  };

  /// Every CUDA selection in user code that can run on a machine without
  /// CUDA and has no CPU fallback, in traversal order, one per location.
  std::vector<Finding> findUnguardedSelections();

  /// Whether \p Call, in the body of \p Caller, runs only where CUDA is
  /// available: it cannot be reached without CUDA from the caller's entry,
  /// or that entry is guarded.
  bool isGuardedCall(const Expr &Call, const FunctionDecl &Caller);

  /// The value that \p E (a condition or scalar) has when CUDA is not
  /// available, where it is known without flow information; for unit tests.
  std::optional<int64_t> valueWithoutCuda(const Expr &E);

  struct Impl;

private:
  std::unique_ptr<Impl> P;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_ANALYSIS_CUDAAVAILABILITYGUARD_H
