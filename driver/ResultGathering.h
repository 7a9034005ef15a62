//===--- ResultGathering.h - torch-tidy driver ------------------*- C++ -*-===//
//
// The TUs' results, in whatever order they finished, become one report:
// findings sorted and unique, tool and compile errors, the rules that ran,
// and what --fix, --fix-unsafe and --export-fixes need.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_RESULTGATHERING_H
#define TORCH_TIDY_DRIVER_RESULTGATHERING_H

#include "OutputFormats.h"
#include "Runner.h"
#include <vector>

namespace torchtidy {

struct GatheredFixes {
  /// The findings of the TUs without compiler errors.
  std::vector<Finding> Fixable;
  /// Their fix-its on notes (--fix-unsafe), sorted and unique.
  std::vector<Finding> UnsafeFixable;
  /// clang-tidy's own diagnostics, for --export-fixes.
  std::vector<clang::tidy::ClangTidyError> RawErrors;
};

/// Adds \p Results to \p R and prints each tool error and each TU with
/// compiler errors (its first error too). \p Fixing: --fix or --fix-unsafe
/// is on, so a TU with errors is said to keep its fix-its unapplied.
GatheredFixes gatherResults(std::vector<TUResult> &Results, bool Fixing,
                            Report &R);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_RESULTGATHERING_H
