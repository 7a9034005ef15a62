//===--- ResultCache.h - torch-tidy driver ----------------------*- C++ -*-===//
//
// --audit's per-TU result cache, `<cache dir>/results/<key>.json`. The key is
// a digest of what decides a TU's findings besides file contents: the tool,
// the file, its compile directory and arguments, and its effective
// clang-tidy configuration. The entry holds the findings and the content
// digest of every file the TU read (the preprocessor's dependency list,
// system headers included); it is used only when all of them are unchanged,
// so an edited header re-analyses exactly the TUs that include it.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_RESULTCACHE_H
#define TORCH_TIDY_DRIVER_RESULTCACHE_H

#include "FileDigest.h"
#include "Runner.h"
#include <optional>
#include <string>
#include <vector>

namespace torchtidy {

class ResultCache {
public:
  ResultCache(llvm::StringRef CacheDir, FileDigests &Digests);

  /// The key of a TU (see above); \p Commands are its compile commands
  /// (directories and arguments after the driver's adjustments) in any
  /// stable spelling, \p Config its configuration as YAML.
  static std::string key(llvm::StringRef ToolId, llvm::StringRef File,
                         llvm::StringRef Commands, llvm::StringRef Config);

  /// The stored result for \p Key when every file it depends on still has
  /// the content it had; std::nullopt otherwise (or when the entry cannot
  /// be read: a damaged entry is a miss, never an error).
  std::optional<TUResult> lookup(llvm::StringRef Key);

  /// Stores \p Result, which must carry its Dependencies. A TU with compiler
  /// errors is stored with the places its missing headers would be found at
  /// (AbsentIncludes): a header created there since is a miss. One with a
  /// tool error is not stored.
  void store(llvm::StringRef Key, const TUResult &Result);

private:
  std::string pathOf(llvm::StringRef Key) const;

  std::string Dir;
  FileDigests &Digests;
};

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_RESULTCACHE_H
