//===--- FixApplier.h - torch-tidy driver -----------------------*- C++ -*-===//
//
// --fix and --export-fixes.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_FIXAPPLIER_H
#define TORCH_TIDY_DRIVER_FIXAPPLIER_H

#include "Finding.h"
#include "clang-tidy/ClangTidyDiagnosticConsumer.h"
#include <string>
#include <vector>

namespace torchtidy {

struct FixStats {
  unsigned FilesWritten = 0;
  unsigned FixesApplied = 0;
  unsigned Failures = 0; // files that could not be written, conflicts
};

/// Applies the fix-its of \p Findings. A file is only rewritten when it has
/// fixes, and then atomically: the new text goes to a temporary file in the
/// same directory, which is renamed over the old one (a run killed midway
/// leaves each file wholly old or wholly new). Identical replacements from
/// several TUs are applied once; a fix that overlaps one already taken is
/// skipped with a warning. Files without any write permission bit are not
/// touched (error), even when running as root.
FixStats applyFixes(const std::vector<Finding> &Findings);

/// Returns a one-line problem if --export-fixes=\p Path cannot be written
/// (its directory is missing, or it names a directory), else "". Checked
/// before the analysis starts.
std::string checkExportPath(llvm::StringRef Path);

/// Writes \p Errors in clang-tidy's YAML replacement format
/// (clang::tidy::exportReplacements), sorted, with \p MainFile as
/// MainSourceFile. Returns false after printing an error.
bool exportFixes(llvm::StringRef Path, llvm::StringRef MainFile,
                 std::vector<clang::tidy::ClangTidyError> Errors);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_FIXAPPLIER_H
