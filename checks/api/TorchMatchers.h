//===--- TorchMatchers.h - torch-tidy ---------------------------*- C++ -*-===//
//
// Shared knowledge of the LibTorch API: the spellings of its types and
// functions, and small AST queries that several checks need.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_API_TORCHMATCHERS_H
#define TORCH_TIDY_API_TORCHMATCHERS_H

#include "clang/AST/ASTContext.h"
#include "clang/AST/Expr.h"
#include "clang/AST/Stmt.h"
#include "clang/ASTMatchers/ASTMatchers.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include <string>
#include <vector>

namespace clang::tidy::torch {

/// Fully qualified names of the functions that return the CUDA caching
/// allocator's free blocks to the driver.
llvm::ArrayRef<llvm::StringRef> emptyCacheFunctionNames();

/// Plain names of the `at::Tensor` methods that return a converted copy and
/// leave the tensor itself untouched (`to`, `cuda`, `pin_memory`, ...).
llvm::ArrayRef<llvm::StringRef> tensorConversionMethodNames();

/// Fully qualified names of the functions that return the number of CUDA
/// devices the process sees.
llvm::ArrayRef<llvm::StringRef> deviceCountFunctionNames();

/// `at::Tensor` (spelt `torch::Tensor` by most users), after typedefs.
/// A `;`/`,`-separated check option of function or type names, trimmed and
/// without empty entries.
std::vector<std::string> parseNameList(llvm::StringRef Option);
/// Whether \p D is named in \p Names: an entry with `::` is compared with
/// the qualified name (a leading `::` is ignored), one without with the
/// plain name.
bool matchesNameList(const NamedDecl &D, llvm::ArrayRef<std::string> Names);

/// How messages name an expression: its source text in quotes when it is
/// short and on one line, \p Fallback otherwise.
std::string quotedSource(const Expr *E, const ASTContext &Ctx,
                         llvm::StringRef Fallback, size_t MaxLength = 40);

bool isTensorType(QualType T);
/// A built-in array of tensors (`torch::Tensor frames[4]`), any rank.
bool isTensorArrayType(QualType T);
/// `c10::Device`.
bool isDeviceType(QualType T);
/// `c10::DeviceType`, the enum behind `torch::kCUDA` and `torch::kCPU`.
bool isDeviceTypeEnum(QualType T);
/// `c10::TensorOptions`.
bool isTensorOptionsType(QualType T);
/// A TorchScript value that may hold tensors: `c10::IValue`, a
/// `c10::ivalue::Tuple` (or other ivalue object) and the `intrusive_ptr`
/// that holds one.
bool isScriptValueType(QualType T);

/// True when \p Child, a direct child of \p Parent, runs as a statement of
/// its own (a block item, an if branch, a loop body or init/increment, a
/// case or label body), so that its value, if any, goes nowhere.
bool isRunAsStatement(const Stmt &Parent, const Stmt &Child, ASTContext &Ctx);

/// Whether \p Call spells an argument (one not filled in by a default).
bool hasSpelledArgument(const CallExpr &Call);

/// The full expression whose value is \p E's, when that value is thrown
/// away (a statement of its own); null when it is used, or cast to void.
const Expr *discardedFullExpression(const Expr &E, ASTContext &Ctx);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_API_TORCHMATCHERS_H
