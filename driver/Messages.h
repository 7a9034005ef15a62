//===--- Messages.h - torch-tidy driver -------------------------*- C++ -*-===//
//
// The driver's own messages on stderr: always one line, prefixed with
// "torch-tidy: error: " / "torch-tidy: warning: " / "torch-tidy: note: ", and
// safe to call from worker threads.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_MESSAGES_H
#define TORCH_TIDY_DRIVER_MESSAGES_H

#include "llvm/ADT/Twine.h"

namespace torchtidy {

void printError(const llvm::Twine &Message);
void printWarning(const llvm::Twine &Message);
/// Informational; suppressed by --quiet.
void printNote(const llvm::Twine &Message);
void setQuiet(bool Quiet);

/// Collapses a possibly multi-line message (e.g. a YAML parser diagnostic)
/// into one line.
std::string oneLine(llvm::StringRef Text);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_MESSAGES_H
