//===--- TorchTidyForceLinker.h - torch-tidy --------------------*- C++ -*-===//
//
// Include in a program that links the checks statically (the driver, the
// fuzzer): referencing the module's anchor keeps its registration in the
// link, as clang-tidy's ClangTidyForceLinker.h does for its own modules.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_TORCHTIDYFORCELINKER_H
#define TORCH_TIDY_TORCHTIDYFORCELINKER_H

#include "llvm/Support/Compiler.h"

namespace clang::tidy {
// Defined in checks/TorchTidyModule.cpp.
extern volatile int TorchTidyModuleAnchorSource;
static int LLVM_ATTRIBUTE_UNUSED TorchTidyModuleAnchorDestination =
    TorchTidyModuleAnchorSource;
} // namespace clang::tidy

#endif // TORCH_TIDY_TORCHTIDYFORCELINKER_H
