//===--- SharedPch.h - torch-tidy driver ------------------------*- C++ -*-===//
//
// --audit's shared precompiled headers. Most TUs of a LibTorch codebase open
// with the same includes (`#include <torch/torch.h>`, a project header that
// includes it, standard headers); parsing those is nearly all of a TU's cost.
// The TUs that share both their compile flags and a leading run of includes
// get one PCH of that run, built once and kept under the cache directory.
//
// Loading a PCH of the prefix and then parsing the TU as it is (its own
// `#include`s of the prefix headers are skipped by their include guards) is
// what `-include-pch` does in a build. It gives the same AST, hence the same
// findings, when:
//  - the TU's first lines are exactly those includes, with nothing before
//    them but comments (the prefix is cut at the first other directive), or
//    the TU opens with a project header whose first lines, after its include
//    guard, are those includes (see resolveIncludes);
//  - every prefix header has an include guard or `#pragma once` (checked
//    when the PCH is built);
//  - the PCH's own build reported nothing: a warning in a prefix header
//    would otherwise be reported by the PCH build instead of by every TU.
// When one of these fails the TUs are parsed in full (see docs/driver.md).
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_SHAREDPCH_H
#define TORCH_TIDY_DRIVER_SHAREDPCH_H

#include "FileDigest.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include <string>
#include <vector>

namespace torchtidy {

/// The `#include` directives that open \p Text, before anything but
/// comments and blank lines, spelled with their delimiters: `<torch/torch.h>`,
/// `"net.h"`. Stops at anything it does not recognise (another directive,
/// a macro as the header name, a line continuation, code).
std::vector<std::string> leadingIncludes(llvm::StringRef Text);

/// \p Includes of the file \p File as a PCH may spell them: angled ones as
/// they are; a quoted one as the absolute path of the file next to \p File
/// (where clang looks first), or the list ends before it when there is none.
/// With \p LookThrough, a quoted first include whose header opens with
/// includes right after its guard (`#pragma once`, or `#ifndef X`/`#define
/// X`) is replaced by those includes, and the list ends there: the TU then
/// includes that header after the PCH, and its own include of, say,
/// <torch/torch.h> is skipped by the guard.
std::vector<std::string> resolveIncludes(llvm::ArrayRef<std::string> Includes,
                                         llvm::StringRef File,
                                         bool LookThrough = true);

/// How --audit sees one TU when it looks for shared prefixes.
struct PrefixCandidate {
  /// TUs can share a PCH only when their keys are equal (same compile
  /// flags, directory and language); "" means the TU cannot use one.
  std::string FlagsKey;
  /// resolveIncludes() of the TU's leading includes.
  std::vector<std::string> Includes;
};

/// A run of leading includes that several TUs with the same flags share.
struct PrefixGroup {
  std::string FlagsKey;
  std::vector<std::string> Includes;
  std::vector<size_t> Members; // indices into the candidates, ascending
};

/// Groups the candidates: among the TUs with the same FlagsKey, those that
/// open with the most common first include form a group whose prefix is the
/// longest run of includes they all open with; repeated on the rest. Groups
/// have at least two members. Deterministic: ties go to the smaller include.
std::vector<PrefixGroup>
planPrefixGroups(llvm::ArrayRef<PrefixCandidate> Candidates);

/// The text of the header that the PCH is built from.
std::string prefixHeaderText(llvm::ArrayRef<std::string> Includes);

/// `<torch/torch.h>, <iostream>`, for messages.
std::string describePrefix(llvm::ArrayRef<std::string> Includes);

/// One shared PCH in the cache directory, `<CacheDir>/pch/<key>/`, where the
/// key is a digest of the tool, the flags and the prefix. Its manifest lists
/// the digests of every file the build read and of the PCH itself; any
/// difference makes it stale, and a stale PCH is rebuilt, never used.
class SharedPCH {
public:
  struct Request {
    std::string CacheDir;
    std::string ToolId;    // changes with the binary (see Audit.cpp)
    std::string Directory; // the compile command's directory
    /// The TUs' compile arguments after the driver's adjustments, without
    /// the source file (equal for every TU of the group).
    std::vector<std::string> FlagArgs;
    std::vector<std::string> Includes;
  };

  enum class State {
    Ready,    // valid: use path()
    Unusable, // built before and found unusable (reason()); inputs unchanged
    Missing,  // never built
    Stale,    // an input or the PCH changed since the build (reason())
  };

  SharedPCH(Request R, FileDigests &Digests);

  /// Validates the cache entry against the files on disk.
  State check();
  /// Builds (or rebuilds) the PCH; afterwards check() is Ready or Unusable.
  /// Returns true when it is Ready.
  bool build();

  const std::string &path() const { return PCHPath; }
  /// Why the PCH is Unusable or Stale, for the one-line message.
  const std::string &reason() const { return Reason; }
  /// Every file the PCH was built from (absolute), for the result cache.
  const std::vector<std::string> &inputs() const { return Inputs; }
  const Request &request() const { return Req; }

private:
  bool writeManifest(bool Usable, llvm::ArrayRef<std::string> Files);

  Request Req;
  FileDigests &Digests;
  std::string Dir, PCHPath, PrefixPath, ManifestPath;
  std::string Reason;
  std::vector<std::string> Inputs;
};

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_SHAREDPCH_H
