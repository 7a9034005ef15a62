//===--- Baseline.h - torch-tidy driver -------------------------*- C++ -*-===//
//
// --baseline and --write-baseline: report only the findings that an earlier
// report (a --format=json document or a SARIF log) does not hold, matched by
// fingerprint (Fingerprint.h); SARIF results then carry their baselineState.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_BASELINE_H
#define TORCH_TIDY_DRIVER_BASELINE_H

#include "OutputFormats.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Error.h"

namespace torchtidy {

struct Baseline {
  llvm::StringSet<> Fingerprints;
  /// The findings themselves: those gone since are reported "absent".
  std::vector<Finding> Findings;
};

/// Reads \p Path; an error names the file and what is wrong with it.
llvm::Expected<Baseline> loadBaseline(llvm::StringRef Path);

/// Keeps in R.Findings the findings \p B does not hold; the others go to
/// R.Unchanged, and B's findings that are gone to R.Absent.
void applyBaseline(Report &R, const Baseline &B);

/// Writes R as a --format=json document to \p Path (through a temporary
/// file, so that an interrupted run leaves the old baseline whole).
llvm::Error writeBaseline(const Report &R, llvm::StringRef Path);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_BASELINE_H
