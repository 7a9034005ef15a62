//===--- Explain.h - torch-tidy driver --------------------------*- C++ -*-===//
//
// --explain <check>: prints the check's documentation page
// (docs/checks/<check>.md) in the terminal.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_EXPLAIN_H
#define TORCH_TIDY_DRIVER_EXPLAIN_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"
#include <string>

namespace torchtidy {

/// Where the documentation pages are: `<bin>/../share/torch-tidy/checks`
/// next to the executable (the build tree and an installation both have
/// it), else the source tree's docs/checks. "" when neither exists.
std::string findDocsDir(const char *Argv0);

/// Prints the page of \p Check ("torch-device-mismatch", or without the
/// "torch-" prefix) to \p OS, headings in bold when \p OS has colours
/// enabled. Returns the exit status: 0, or 2 after a one-line error for an
/// unknown check or a missing page.
int explainCheck(llvm::StringRef Check, const char *Argv0,
                 llvm::raw_ostream &OS);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_EXPLAIN_H
