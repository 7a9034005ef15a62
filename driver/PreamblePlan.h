//===--- PreamblePlan.h - torch-tidy driver ---------------------*- C++ -*-===//
//
// Which TUs of a run share which preamble PCH (SharedPch.h), when each PCH
// is built, and whether a TU waits for it or is parsed in full. Used by
// --audit and by a plain run (the pre-commit hook), which both keep the
// PCHs in the cache directory: a plain run reuses what an audit, or an
// earlier run, left there, and builds a missing one for a single TU.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_PREAMBLEPLAN_H
#define TORCH_TIDY_DRIVER_PREAMBLEPLAN_H

#include "FileDigest.h"
#include "PreambleScan.h"
#include "SharedPch.h"
#include "llvm/ADT/Twine.h"
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace torchtidy {

/// One TU as the planner sees it.
struct PreambleInput {
  std::string File;
  std::string Directory;
  /// splitPreambleFlags() of its only compile command; nullopt when it has
  /// several, is not C++, or a flag forbids a shared preamble.
  std::optional<PreambleFlags> Flags;
  /// Whether it is parsed without the system bodies that no check reads.
  bool SkipBodies = true;
  /// Whether it will be analysed (not read from the result cache).
  bool Analysed = true;
};

/// A TU to analyse, as the queue of --audit orders it.
struct QueuedTU {
  size_t Index = 0;
  uint64_t Size = 0; // of the main file
  llvm::StringRef File;
  /// SharedPreambles::waitsForBuild().
  bool WaitsForBuild = false;
};

/// Sorts \p Queue into the order the TUs start in, after the PCH builds:
/// those that need no build first (full parses, the longest, run beside the
/// builds instead of after them), then those that wait for one; largest
/// first within each, so that a long TU does not finish alone.
void sortForAnalysis(std::vector<QueuedTU> &Queue);

class SharedPreambles {
public:
  struct Options {
    std::string CacheDir;
    std::string ToolId;
    /// TUs to analyse that a PCH must serve for it to be built.
    unsigned MinMembers = 2;
  };
  /// \p Note prints an informational line, once per text.
  SharedPreambles(Options O, FileDigests &Digests,
                  std::function<void(const llvm::Twine &)> Note);
  ~SharedPreambles();

  /// Groups the TUs (all of them, so that the prefixes do not depend on
  /// what changed) and checks the PCHs of the groups with TUs to analyse.
  void plan(std::vector<PreambleInput> TUs);

  /// The groups whose PCH is to be built; run build() on each.
  std::vector<size_t> pendingBuilds() const;
  void build(size_t Group);

  /// What TU \p I loads.
  struct Use {
    std::string PCHPath; // "" to parse in full
    const PreambleFacts *Facts = nullptr;
  };
  /// Called as TU \p I starts: a Ready PCH that the TU's project dirs do
  /// not shadow. A TU whose PCH is being built waits for it when its group
  /// has at least \p Threads TUs to analyse (the queue is long: a full parse
  /// beside the build costs more than the wait); in a smaller group it is
  /// parsed in full beside the build.
  Use start(size_t I, unsigned Threads);
  /// Whether start(I, Threads) would wait for a PCH being built now: the
  /// caller runs such TUs after those that need no build, which then parse
  /// beside it.
  bool waitsForBuild(size_t I, unsigned Threads) const;
  /// The TU was parsed with the PCH, which could not be used (\p Why).
  void fellBack(size_t I, llvm::StringRef Why);

  /// The PCH's size, for the memory estimate of TU \p I (0: no PCH).
  uint64_t pchBytes(size_t I) const;
  /// Notes, once per PCH, the TUs whose include dirs kept them from it.
  void finish();

  unsigned built() const { return Built; }
  unsigned fellBackCount() const { return FellBack; }
  const std::string &fallbackExample() const { return FallbackExample; }
  /// `61 MiB, built in 9.8 s` for the PCHs used or built, or "".
  std::string describeUsed() const;

private:
  struct Group;
  Group *groupOf(size_t I) const;
  /// Whether a TU of \p G waits for its build (Mutex held).
  static bool waits(const Group &G, unsigned Threads);

  Options Opts;
  FileDigests &Digests;
  std::function<void(const llvm::Twine &)> Note;
  std::vector<PreambleInput> TUs;
  std::vector<std::unique_ptr<Group>> Groups;
  std::vector<Group *> ByTU;

  mutable std::mutex Mutex;
  std::condition_variable Changed;
  std::atomic<unsigned> Built{0}, FellBack{0};
  std::string FallbackExample;
  std::set<Group *> Used;
};

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_PREAMBLEPLAN_H
