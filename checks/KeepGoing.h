//===--- KeepGoing.h - torch-tidy -------------------------------*- C++ -*-===//
//
// A compile database often lacks one dependency's include path (Eigen,
// OpenCV, Python.h, a submodule never checked out). clang's "file not found"
// is a fatal error: every later #include, <torch/torch.h> included, is then
// skipped and the torch findings vanish. A clang-tidy check first meets the
// compiler's DiagnosticsEngine in registerPPCallbacks, before the main file is
// read; there each torch check makes fatal errors plain errors, as libclang's
// CXTranslationUnit_KeepGoing does. The error is still reported.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_KEEPGOING_H
#define TORCH_TIDY_KEEPGOING_H

#include "clang-tidy/ClangTidyModule.h"

namespace clang::tidy::torch {

/// Wraps every registered check whose name starts with \p Prefix so that it
/// turns fatal errors into errors before the TU is parsed.
void keepGoingPastFatalErrors(ClangTidyCheckFactories &Factories,
                              llvm::StringRef Prefix);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_KEEPGOING_H
