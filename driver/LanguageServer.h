//===--- LanguageServer.h - torch-tidy driver -------------------*- C++ -*-===//
//
// `torch-tidy lsp [driver options] [-- compiler flags]`: a Language Server
// Protocol server over stdio. On open and on save it checks the file the way
// the pre-commit hook does (one `torch-tidy --format=json` run that loads
// the shared preamble), publishes the findings as diagnostics with their
// notes as related information, and offers their fix-its as code actions.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_LANGUAGESERVER_H
#define TORCH_TIDY_DRIVER_LANGUAGESERVER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include <string>

namespace torchtidy {

/// Runs the server until `exit`; returns the process's exit status.
int languageServerMain(llvm::ArrayRef<const char *> Args, const char *Argv0);

/// The UTF-16 code units in the first \p ByteColumn - 1 bytes of \p Line
/// (LSP positions count UTF-16, clang counts bytes).
unsigned utf16Column(llvm::StringRef Line, unsigned ByteColumn);

/// file:// URIs of absolute paths, and back ("" for another scheme).
std::string uriFromPath(llvm::StringRef Path);
std::string pathFromUri(llvm::StringRef Uri);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_LANGUAGESERVER_H
