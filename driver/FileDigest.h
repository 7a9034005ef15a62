//===--- FileDigest.h - torch-tidy driver -----------------------*- C++ -*-===//
//
// Content digests for --audit's caches: what a cached PCH or result depends
// on is compared by content, never by timestamp, so a `touch` costs nothing
// and an edit that keeps the size and mtime is still seen.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_FILEDIGEST_H
#define TORCH_TIDY_DRIVER_FILEDIGEST_H

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include <mutex>
#include <optional>
#include <string>

namespace torchtidy {

/// 128-bit xxh3 of \p Data, as 32 hex digits.
std::string digestOf(llvm::StringRef Data);

/// \p Name, as clang reports a file it read, made absolute against \p Dir
/// (the compile directory). `..` is kept: removing it by text is wrong
/// across a symlink (clang finds GCC's headers as
/// /lib/gcc/x86_64-linux-gnu/12/../../../../include/c++/12/vector, and /lib
/// is a link to /usr/lib).
std::string dependencyPath(llvm::StringRef Name, llvm::StringRef Dir);

/// The digests of files' contents, each file read at most once per run (the
/// headers of a codebase are shared by most TUs). Thread-safe.
class FileDigests {
public:
  /// The digest of \p Path's content, or std::nullopt when it cannot be read.
  std::optional<std::string> get(llvm::StringRef Path);

private:
  std::mutex Mutex;
  llvm::StringMap<std::optional<std::string>> Known;
};

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_FILEDIGEST_H
