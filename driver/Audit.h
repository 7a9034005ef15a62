//===--- Audit.h - torch-tidy driver ----------------------------*- C++ -*-===//
//
// `torch-tidy --audit -p BUILD_DIR`: every TU of the database, at close to
// the cost of parsing each once:
//  - results are cached per TU (ResultCache.h): an unchanged TU costs a few
//    file reads;
//  - the TUs left share precompiled headers of their common leading
//    includes (SharedPch.h), built once per set of compile flags;
//  - they run largest first on -j threads, within a memory budget
//    (MemoryBudget.h), with a progress line and ETA on a terminal.
// The findings are the same as without any of it (tested on the examples
// and on generated corpora).
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_AUDIT_H
#define TORCH_TIDY_DRIVER_AUDIT_H

#include "Runner.h"
#include <cstdint>
#include <string>
#include <vector>

namespace torchtidy {

/// What an audit did (the summary note's figures), for --format=html.
struct AuditStats {
  unsigned FromCache = 0, Analysed = 0, WithPCH = 0, PCHsBuilt = 0;
};

struct AuditOptions {
  /// Where the PCHs and results live (`<build dir>/.torch-tidy-cache`).
  std::string CacheDir;
  bool UsePCH = true;
  bool UseResultCache = true;
  /// Bytes the parses may use at once; 0: 80% of availableMemory().
  uint64_t MemoryBudget = 0;
  /// Changes with the binary, so that its caches die with it.
  std::string ToolId;
  /// Show `[i/N] ETA file` on a terminal.
  bool Progress = false;
  /// The second, cross-TU phase (CrossTU.h).
  bool CrossTU = true;
  /// Filled at the end when not null.
  AuditStats *Stats = nullptr;
  /// TUs to analyse that a shared PCH must serve for it to be built.
  unsigned MinSharers = 2;
  /// The summary line and the notes on the caches (--audit); without it
  /// RunOptions::OnStart reports each TU as it starts (a plain run).
  bool Summary = true;
};

/// A digest of this torch-tidy binary (path, size, modification time) and
/// of the clang it was built with.
std::string toolIdentity(const char *Argv0);

/// Analyses every job as runAll() does, with the caches and the PCHs; the
/// result at index I belongs to Jobs[I]. With AuditOptions::Summary, prints
/// one summary note and, once each, why a PCH was not used. A plain run
/// (the pre-commit hook) uses it without the result cache, to share the
/// preambles that an audit or an earlier run left in the cache directory.
std::vector<TUResult> runAudit(const std::vector<TUJob> &Jobs,
                               const RunOptions &Options,
                               const AuditOptions &Audit);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_AUDIT_H
