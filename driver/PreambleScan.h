//===--- PreambleScan.h - torch-tidy driver ---------------------*- C++ -*-===//
//
// Planning the shared preamble: what a TU includes from the system headers
// before its first line of code, and which of its flags can change what those
// headers mean. Both are read from the text and the command line, cheaply and
// conservatively; PreambleGuard.h checks the prediction during the parse.
//
// A TU reaches <torch/torch.h> through its own headers (`"model.h"`, which
// includes <torch/torch.h>) under per-target `-I` dirs. The preamble is the
// sequence of system headers that the TU and its project headers include
// before any code, the PCH holds exactly those, and the TU is parsed as it is
// after loading it: its own includes of them are skipped by their guards.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_PREAMBLESCAN_H
#define TORCH_TIDY_DRIVER_PREAMBLESCAN_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include <optional>
#include <string>
#include <vector>

namespace torchtidy {

/// A TU's compile arguments as the shared preamble sees them.
struct PreambleFlags {
  /// Everything that can change what a system header means (the standard,
  /// macros, target, system include dirs, ...): the arguments without the
  /// source file and without the project's include dirs, relative paths made
  /// absolute. TUs with equal KeyArgs can share a preamble.
  std::vector<std::string> KeyArgs;
  /// The project's include dirs in search order, absolute, spelled
  /// `-iquote<dir>` or `-I<dir>`. A preamble built without one of them is
  /// used only when the dir holds no header the preamble looked up
  /// (SharedPch.h).
  std::vector<std::string> ProjectDirs;
  /// For resolving includes while planning.
  std::vector<std::string> QuoteDirs, AngledDirs, SystemDirs;
};

/// \p Args (the compile command after the driver's adjustments, the
/// compiler first) split as above, run in \p Directory on \p File; nullopt
/// when a flag puts something before the file or changes how headers are
/// read (`-include`, `-imacros`, `-include-pch`, modules, `-x`, a VFS
/// overlay, another working directory, clang-cl).
std::optional<PreambleFlags> splitPreambleFlags(llvm::ArrayRef<std::string> Args,
                                                llvm::StringRef Directory,
                                                llvm::StringRef File);

/// The system headers that \p File includes, directly or through its
/// project headers, before anything else: `<torch/torch.h>`, `<vector>`.
/// The scan follows the preprocessor's order into project headers, lets
/// include guards, `#pragma once` and `#define`s pass, and stops at code or
/// any other directive. The list ends with the last header found in a
/// system dir of the command line (`-isystem`: LibTorch): the standard
/// library's headers after it cost little and vary from TU to TU. It may be
/// empty.
std::vector<std::string> systemPrefix(llvm::StringRef File,
                                      const PreambleFlags &Flags);

/// How the planner sees one TU.
struct PrefixCandidate {
  /// TUs can share a preamble only when their keys are equal; "" means the
  /// TU cannot use one.
  std::string FlagsKey;
  /// systemPrefix() of the TU.
  std::vector<std::string> Includes;
};

/// A run of leading includes that TUs with the same flags share.
struct PrefixGroup {
  std::string FlagsKey;
  std::vector<std::string> Includes;
  std::vector<size_t> Members; // indices into the candidates, ascending
};

/// Groups the candidates: among the TUs with the same FlagsKey, those that
/// open with the most common first include form a group whose prefix is the
/// longest run of includes they all open with; repeated on the rest. Groups
/// have at least \p MinMembers members. Deterministic: ties go to the
/// smaller include.
std::vector<PrefixGroup>
planPrefixGroups(llvm::ArrayRef<PrefixCandidate> Candidates,
                 unsigned MinMembers = 2);

/// The text of the header that the PCH is built from.
std::string prefixHeaderText(llvm::ArrayRef<std::string> Includes);

/// `<torch/torch.h>, <iostream>`, for messages.
std::string describePrefix(llvm::ArrayRef<std::string> Includes);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_PREAMBLESCAN_H
