//===--- TorchTidyModule.cpp - torch-tidy ---------------------------------===//
//
// Registers the `torch` clang-tidy module. Every check of the catalog in
// docs/index.md is added here, one line each, sorted by name.
//
//===----------------------------------------------------------------------===//

#include "EmptyCacheInLoopCheck.h"
#include "clang-tidy/ClangTidyModule.h"
#include "clang-tidy/ClangTidyModuleRegistry.h"

namespace clang::tidy::torch {

class TorchModule : public ClangTidyModule {
public:
  void addCheckFactories(ClangTidyCheckFactories &Factories) override {
    Factories.registerCheck<EmptyCacheInLoopCheck>("torch-empty-cache-in-loop");
  }
};

} // namespace clang::tidy::torch

namespace clang::tidy {

static ClangTidyModuleRegistry::Add<torch::TorchModule>
    X("torch-module", "Checks for LibTorch device, transfer and memory bugs.");

// Referenced by the driver so that the linker keeps this translation unit.
// NOLINTNEXTLINE(misc-use-internal-linkage)
volatile int TorchTidyModuleAnchorSource = 0;

} // namespace clang::tidy
