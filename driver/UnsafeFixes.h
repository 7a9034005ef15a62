//===--- UnsafeFixes.h - torch-tidy driver ----------------------*- C++ -*-===//
//
// --fix-unsafe. A check attaches a safe fix-it to its warning (applied by
// --fix) and an unsafe one to a note, as clang-tidy expects: clang-tidy
// applies note fix-its only with --fix-notes, and --fix-unsafe is the same
// rule in the driver.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_UNSAFEFIXES_H
#define TORCH_TIDY_DRIVER_UNSAFEFIXES_H

#include "Finding.h"
#include "clang-tidy/ClangTidyDiagnosticConsumer.h"
#include "llvm/ADT/ArrayRef.h"
#include <vector>

namespace torchtidy {

/// The fix-its --fix-notes would add to --fix: for each diagnostic without a
/// fix-it of its own, the fix-it of its one note that has any (none when
/// several notes offer one). Each is returned as a copy of the diagnostic's
/// finding that carries that fix-it.
std::vector<Finding>
noteFixFindings(llvm::ArrayRef<clang::tidy::ClangTidyError> Errors);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_UNSAFEFIXES_H
