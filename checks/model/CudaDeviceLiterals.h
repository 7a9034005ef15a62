//===--- CudaDeviceLiterals.h - torch-tidy ----------------------*- C++ -*-===//
//
// The LibTorch types a device literal travels through on its way to a device
// selection, shared by the parts of the CUDA availability model. The literal
// classification itself is declared in CudaAvailabilityGuard.h.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_ANALYSIS_CUDADEVICELITERALS_H
#define TORCH_TIDY_ANALYSIS_CUDADEVICELITERALS_H

#include "clang/AST/DeclCXX.h"
#include "clang/AST/Expr.h"
#include <string>
#include <vector>

namespace clang::tidy::torch::cuda_guard {

/// The class of \p T, through references and typedefs; null for non-classes.
const CXXRecordDecl *recordOf(QualType T);

/// `c10::Device`.
bool isDeviceRecord(const CXXRecordDecl *RD);
/// `c10::TensorOptions`.
bool isTensorOptionsRecord(const CXXRecordDecl *RD);
/// `at::Tensor` or `at::TensorBase`.
bool isTensorRecord(const CXXRecordDecl *RD);

/// Whether the fully qualified name of \p FD is one of \p Names.
bool nameIn(const FunctionDecl &FD, const std::vector<std::string> &Names);

/// Skips the wrappers a device literal travels through on its way to a
/// Device: casts, temporaries, `std::string` and Device construction.
const Expr *stripToDeviceLiteral(const Expr *E);

} // namespace clang::tidy::torch::cuda_guard

#endif // TORCH_TIDY_ANALYSIS_CUDADEVICELITERALS_H
