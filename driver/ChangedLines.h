//===--- ChangedLines.h - torch-tidy driver ---------------------*- C++ -*-===//
//
// --diff-base / --diff-staged: the lines that `git diff` says changed, and
// the findings that touch them (their location or a note's), as
// clang-tidy-diff.py does.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_CHANGEDLINES_H
#define TORCH_TIDY_DRIVER_CHANGEDLINES_H

#include "Finding.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"
#include <utility>
#include <vector>

namespace torchtidy {

/// Per absolute file, the changed line ranges (first, last; 1-based) of the
/// new side.
using ChangedLines = llvm::StringMap<std::vector<std::pair<unsigned, unsigned>>>;

/// Parses `git diff -U0` output whose paths are relative to \p Root.
ChangedLines parseUnifiedDiff(llvm::StringRef Diff, llvm::StringRef Root);

/// Runs `git diff -U0` in the repository around \p Dir: against \p Base
/// (the working tree's changes since that ref), or, when \p Base is empty,
/// the staged changes.
llvm::Expected<ChangedLines> changedLines(llvm::StringRef Dir,
                                          llvm::StringRef Base);

/// Keeps the findings whose location, or one of whose notes, is on a
/// changed line.
void keepChanged(std::vector<Finding> &Findings, const ChangedLines &Changed);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_CHANGEDLINES_H
