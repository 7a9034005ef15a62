//===--- SharedPch.h - torch-tidy driver ------------------------*- C++ -*-===//
//
// The shared preamble: one PCH of the system headers that open many TUs
// (<torch/torch.h>, standard headers), kept in the cache directory, built
// once and loaded by every TU whose flags and text allow it (PreambleScan.h
// plans, PreambleGuard.h says when that is sound). It is built the way the
// TUs are parsed: without the system bodies that no check reads
// (SystemBodies.h).
//
// `<cache>/pch/<flags>/<headers>/`, where <flags> is a digest of the tool,
// the clang version, the body skipping and PreambleFlags::KeyArgs, and
// <headers> one of the headers, holds:
//   prefix.h        the header the PCH is built from;
//   <digest>.pch    the PCH, named by its content;
//   words.txt       every identifier of the files the build read;
//   manifest.json   the content digest of every file the build read, of the
//                   PCH and of words.txt, and what PreambleFacts needs.
// Any difference in a digest makes it stale, and a stale PCH is rebuilt,
// never used. The manifest is written last and atomically, so it always
// describes a whole build, also with several processes building at once.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_SHAREDPCH_H
#define TORCH_TIDY_DRIVER_SHAREDPCH_H

#include "FileDigest.h"
#include "PreambleFacts.h"
#include <memory>
#include <string>
#include <vector>

namespace llvm::json {
class Object;
}

namespace torchtidy {

class SharedPCH {
public:
  struct Request {
    std::string CacheDir;
    std::string ToolId; // changes with the binary (see Audit.cpp)
    /// Where the build runs: a compile directory of one of the TUs (the
    /// arguments' paths are absolute).
    std::string Directory;
    /// PreambleFlags::KeyArgs of the TUs (the compiler first).
    std::vector<std::string> KeyArgs;
    /// The headers, spelled `<torch/torch.h>`.
    std::vector<std::string> Includes;
    bool SkipBodies = true;
  };

  enum class State {
    Ready,    // valid: use path() and facts()
    Unusable, // built before and found unusable (reason()); inputs unchanged
    Missing,  // never built
    Stale,    // an input or the PCH changed since the build (reason())
  };

  SharedPCH(Request R, FileDigests &Digests);

  /// The headers of the PCHs in the cache under \p R's tool, flags and body
  /// skipping (whatever R.Includes is), as their manifests list them.
  static std::vector<std::vector<std::string>> cachedPrefixes(const Request &R);

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
  /// When Ready: what the TUs that load it are checked against.
  const PreambleFacts &facts() const { return *Facts; }
  /// When Ready: the project include dirs that cannot share it.
  ShadowCheck &shadows() { return *Shadows; }
  /// When Ready: the PCH's size in bytes, and how long its build took.
  uint64_t bytes() const { return Bytes; }
  double buildSeconds() const { return BuildSeconds; }

private:
  bool load(const llvm::json::Object &Manifest);
  bool writeManifest(bool Usable, llvm::ArrayRef<std::string> Files,
                     const PreambleFacts &F, llvm::StringRef WordsDigest);

  Request Req;
  FileDigests &Digests;
  std::string Dir, PCHPath, PrefixPath, ManifestPath, WordsPath;
  std::string Reason;
  std::vector<std::string> Inputs;
  std::unique_ptr<PreambleFacts> Facts;
  std::unique_ptr<ShadowCheck> Shadows;
  uint64_t Bytes = 0;
  double BuildSeconds = 0;
};

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_SHAREDPCH_H
