//===--- PreambleFacts.h - torch-tidy driver --------------------*- C++ -*-===//
//
// What a shared preamble's PCH build saw, kept next to the PCH, and the two
// checks on it that need no parse: the words of its headers, and whether a
// project include dir would shadow a header it looked up (PreambleGuard.h
// says why each matters).
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_PREAMBLEFACTS_H
#define TORCH_TIDY_DRIVER_PREAMBLEFACTS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include <mutex>
#include <string>
#include <vector>

namespace torchtidy {

/// What the PCH's build saw, kept next to the PCH (SharedPch.cpp).
struct PreambleFacts {
  /// The preamble's headers, as found (real paths), in order.
  std::vector<std::string> Headers;
  /// Names looked up by #include or __has_include, except those found next
  /// to the including file.
  std::vector<std::string> Lookups;
  /// Macros that the PCH's files define or undefine.
  llvm::StringSet<> Macros;
  /// Every identifier in the text of every file the PCH read.
  llvm::StringSet<> Words;
};

/// Adds every identifier of \p Text to \p Words (comments and disabled code
/// included: a superset of what the preprocessor may look at).
void collectWords(llvm::StringRef Text, llvm::StringSet<> &Words);

/// The first `<dir>/<name>` that exists, for a project dir of \p ProjectDirs
/// (spelled `-I<dir>` or `-iquote<dir>`) and a name the PCH looked up: such
/// a file would be found instead of the PCH's. "" when there is none.
/// Thread-safe; results are cached per dir.
class ShadowCheck {
public:
  explicit ShadowCheck(std::vector<std::string> Lookups)
      : Lookups(std::move(Lookups)) {}
  std::string shadowingHeader(llvm::ArrayRef<std::string> ProjectDirs);

private:
  std::vector<std::string> Lookups;
  std::mutex Mutex;
  llvm::StringMap<std::string> ByDir;
};

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_PREAMBLEFACTS_H
