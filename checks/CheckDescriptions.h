//===--- CheckDescriptions.h - torch-tidy -----------------------*- C++ -*-===//
//
// One line per check of the catalog (../shared/checks.md): its name and a
// one-sentence description. The driver prints these for `--list-checks` and
// uses them as SARIF `shortDescription`s. Only checks that are registered in
// TorchTidyModule.cpp (and enabled) are ever shown, so an entry may exist here
// before its check lands. Keep the table sorted by name; when you add a check,
// add or reword its line here.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_CHECKDESCRIPTIONS_H
#define TORCH_TIDY_CHECKDESCRIPTIONS_H

#include <string_view>

namespace clang::tidy::torch {

struct CheckDescription {
  std::string_view Name;
  std::string_view Summary;
};

inline constexpr CheckDescription CheckDescriptions[] = {
    {"torch-autocast-region",
     "Autocast left on by an early return or a throw, backward() inside "
     "autocast, or a float16 loss with no loss scaling."},
    {"torch-cuda-unguarded",
     "CUDA device used on a path with no torch::cuda::is_available() check "
     "and no CPU fallback."},
    {"torch-device-index-unchecked",
     "Hard-coded CUDA ordinal above 0 never compared with "
     "torch::cuda::device_count()."},
    {"torch-device-mismatch",
     "Operation whose operands (tensors or module parameters) are known to be "
     "on different devices."},
    {"torch-empty-cache-in-loop",
     "emptyCache() called once per loop iteration; it synchronises the device "
     "and forces cudaMalloc again."},
    {"torch-empty-cache-oom-retry",
     "emptyCache() in an out-of-memory handler before a same-size retry; the "
     "allocator already did that."},
    {"torch-eval-mode-missing",
     "Evaluation forward of a module with Dropout or BatchNorm while it is in "
     "training mode (or a training forward in evaluation mode)."},
    {"torch-grad-accumulation-unscaled",
     "Gradient accumulation (step() every N iterations) whose mean loss is "
     "never divided by N."},
    {"torch-host-sync-in-loop",
     "Unconditional host-device synchronisation inside a training loop."},
    {"torch-inference-without-no-grad",
     "Module forward in a loop without backward() and without NoGradGuard or "
     "InferenceMode."},
    {"torch-loss-accumulation-graph",
     "Autograd tensor accumulated across loop iterations without .item() or "
     ".detach(), keeping every graph alive."},
    {"torch-missing-zero-grad",
     "Optimizer step() after which some path reaches the next backward() "
     "without resetting any gradients."},
    {"torch-non-blocking-d2h-race",
     "Non-blocking device-to-host copy read on the host before any "
     "synchronisation."},
    {"torch-non-blocking-pageable",
     "non_blocking host-to-device copy from pageable memory; it runs "
     "synchronously."},
    {"torch-tensor-to-discarded",
     "Discarded result of a tensor conversion (to, cuda, cpu, pin_memory, "
     "contiguous); tensors are not converted in place."},
};

/// The one-line description of \p Name, or an empty view when there is none.
constexpr std::string_view getCheckDescription(std::string_view Name) {
  for (const CheckDescription &D : CheckDescriptions)
    if (D.Name == Name)
      return D.Summary;
  return {};
}

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_CHECKDESCRIPTIONS_H
