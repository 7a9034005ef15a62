//===--- TorchTidyModule.cpp - torch-tidy ---------------------------------===//
//
// Registers the `torch` clang-tidy module. Every check of the catalog in
// docs/index.md is added here, one line each, sorted by name.
//
//===----------------------------------------------------------------------===//

#include "AutocastRegionCheck.h"
#include "CudaUnguardedCheck.h"
#include "DeviceIndexUncheckedCheck.h"
#include "DeviceMismatchCheck.h"
#include "EmptyCacheInLoopCheck.h"
#include "EmptyCacheOomRetryCheck.h"
#include "EvalModeMissingCheck.h"
#include "GradAccumulationUnscaledCheck.h"
#include "NonBlockingD2HRaceCheck.h"
#include "NonBlockingPageableCheck.h"
#include "HostSyncInLoopCheck.h"
#include "InferenceWithoutNoGradCheck.h"
#include "LossAccumulationGraphCheck.h"
#include "MissingZeroGradCheck.h"
#include "TensorToDiscardedCheck.h"
#include "KeepGoing.h"
#include "clang-tidy/ClangTidyModule.h"
#include "clang-tidy/ClangTidyModuleRegistry.h"

namespace clang::tidy::torch {

class TorchModule : public ClangTidyModule {
public:
  void addCheckFactories(ClangTidyCheckFactories &Factories) override {
    Factories.registerCheck<AutocastRegionCheck>("torch-autocast-region");
    Factories.registerCheck<CudaUnguardedCheck>("torch-cuda-unguarded");
    Factories.registerCheck<DeviceMismatchCheck>("torch-device-mismatch");
    Factories.registerCheck<DeviceIndexUncheckedCheck>(
        "torch-device-index-unchecked");
    Factories.registerCheck<EmptyCacheInLoopCheck>("torch-empty-cache-in-loop");
    Factories.registerCheck<EmptyCacheOomRetryCheck>(
        "torch-empty-cache-oom-retry");
    Factories.registerCheck<EvalModeMissingCheck>("torch-eval-mode-missing");
    Factories.registerCheck<GradAccumulationUnscaledCheck>(
        "torch-grad-accumulation-unscaled");
    Factories.registerCheck<HostSyncInLoopCheck>("torch-host-sync-in-loop");
    Factories.registerCheck<InferenceWithoutNoGradCheck>(
        "torch-inference-without-no-grad");
    Factories.registerCheck<LossAccumulationGraphCheck>(
        "torch-loss-accumulation-graph");
    Factories.registerCheck<MissingZeroGradCheck>("torch-missing-zero-grad");
    Factories.registerCheck<NonBlockingD2HRaceCheck>(
        "torch-non-blocking-d2h-race");
    Factories.registerCheck<NonBlockingPageableCheck>(
        "torch-non-blocking-pageable");
    Factories.registerCheck<TensorToDiscardedCheck>("torch-tensor-to-discarded");
    keepGoingPastFatalErrors(Factories, "torch-");
  }
};

} // namespace clang::tidy::torch

namespace clang::tidy {

static ClangTidyModuleRegistry::Add<torch::TorchModule>
    X("TorchModule", "Checks for LibTorch device, transfer and memory bugs.");

// Referenced by the driver so that the linker keeps this translation unit.
// NOLINTNEXTLINE(misc-use-internal-linkage)
volatile int TorchTidyModuleAnchorSource = 0;

} // namespace clang::tidy
