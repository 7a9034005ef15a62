//===--- Devices.h - torch-tidy ---------------------------------*- C++ -*-===//
//
// How LibTorch code names devices and asks about them: device literals
// (`torch::kCUDA`, `"cuda:1"`, `c10::DeviceType::CPU`), the CUDA
// availability queries and the device count functions.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_API_DEVICES_H
#define TORCH_TIDY_API_DEVICES_H

#include "TorchApi.h"
#include "clang/AST/Expr.h"
#include "clang/AST/ParentMap.h"

namespace clang::tidy::torch {

/// What device a device literal names.
enum class DeviceLiteralKind { None, CUDA, CPU };

/// The device named by \p E when it is a reference to `c10::kCUDA`/`kCPU` (any
/// alias of them) or to the enumerators `c10::DeviceType::CUDA`/`CPU`, or a
/// device string literal `"cuda"`, `"cuda:N"`, `"cpu"`.
DeviceLiteralKind classifyDeviceLiteral(const Expr &E);

/// `t.cuda()` / `t.cpu()` on an at::Tensor.
bool isTensorCudaCall(const Expr &E);
bool isTensorCpuCall(const Expr &E);

/// `torch::cuda::is_available()` and the other queries that are false (or
/// 0) without CUDA, and the project's own (\p Opts.GuardFunctions).
bool isAvailabilityQuery(const FunctionDecl &FD, const TorchApiOptions &Opts);
/// `torch::cuda::device_count()` and the other device count functions, and
/// the project's own (\p Opts.ExtraDeviceCountFunctions).
bool isDeviceCountFunction(const FunctionDecl &FD, const TorchApiOptions &Opts);
/// `cudaGetDeviceCount(&n)`: the variable its argument points to.
const Expr *deviceCountOutArgument(const CallExpr &Call);
/// A function named in \p Opts.DeviceSelectorFunctions: it picks a device
/// itself and falls back to the CPU.
bool isDeviceSelector(const FunctionDecl &FD, const TorchApiOptions &Opts);

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
                                          const TorchApiOptions &Opts);

/// Strips implicit code, temporaries and the Device / TensorOptions /
/// std::string constructors around a device literal.
const Expr *stripToDeviceLiteral(const Expr *E);

/// A device written out in place: a string, a DeviceType enumerator or
/// constant, `torch::Device(type, ...)`.
bool isDeviceLiteral(const Expr *E);

/// The argument that gives the CUDA ordinal of \p S, when it is a Device or
/// TensorOptions construction, `.device(...)`, `.device_index(...)` or
/// `c10::device_index(...)`, written out or not: the index of
/// `Device(kCUDA, index)`, the spec of `Device(spec)`; null when \p S gives
/// none. \p IsString: a spec string.
const Expr *cudaOrdinalArgument(const Stmt &S, const ASTContext &Ctx,
                                bool &IsString);

/// The ordinal that \p E spells as a literal: an integer literal, or, with
/// \p String, a `"cuda:N"` string (through std::string constructions). Sets
/// \p Ordinal and returns the literal; null otherwise.
const Expr *ordinalLiteral(const Expr *E, int64_t &Ordinal, bool String);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_API_DEVICES_H
