//===--- CrossTU.h - torch-tidy driver --------------------------*- C++ -*-===//
//
// The second phase of `--audit`: every TU of the first phase exported the
// summaries of its functions and what it knows at its calls; merged, they
// are the program's summaries (written to `<cache dir>/summaries.json`,
// which `--summaries` reads back). The TUs whose calls reach a function
// defined in another TU with a summary, or whose functions the program only
// calls under a guard, are analysed again with them.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_CROSSTU_H
#define TORCH_TIDY_DRIVER_CROSSTU_H

#include "Runner.h"
#include "model/ExternalSummaries.h"
#include <memory>
#include <vector>

namespace torchtidy {

struct CrossTUPlan {
  std::shared_ptr<const clang::tidy::torch::ExternalSummaries> Summaries;
  /// The TUs (indices into the results) to analyse again, and for each a
  /// digest of the facts it reads, for the result cache's key.
  std::vector<size_t> Rerun;
  std::vector<std::string> ReadDigests;
};

/// Merges the exports of \p Results (a TU without one exports nothing).
/// \p FirstPhase[I]: result I is still the first phase's, made without the
/// program's facts; such a TU is analysed again for an entry context only
/// when the other TUs' calls change it.
CrossTUPlan planCrossTU(const std::vector<TUResult> &Results,
                        const std::vector<bool> &FirstPhase);

/// Writes the program's summaries to \p Path atomically; false on failure.
bool writeSummaries(const clang::tidy::torch::ExternalSummaries &Summaries,
                    llvm::StringRef Path);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_CROSSTU_H
