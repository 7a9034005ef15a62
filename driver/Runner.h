//===--- Runner.h - torch-tidy driver ---------------------------*- C++ -*-===//
//
// Runs clang-tidy's engine with the torch module over a list of translation
// units, in parallel, one ClangTidyContext per TU, and collects the results.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_RUNNER_H
#define TORCH_TIDY_DRIVER_RUNNER_H

#include "CompileDb.h"
#include "Finding.h"
#include "PreambleGuard.h"
#include "clang-tidy/ClangTidyDiagnosticConsumer.h"
#include "clang-tidy/ClangTidyOptions.h"
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace torchtidy {

struct RunOptions {
  /// Worker threads; 0 means one per hardware thread.
  unsigned Jobs = 0;
  /// --extra-arg-before / --extra-arg, added to every compile command.
  std::vector<std::string> ExtraArgsBefore;
  std::vector<std::string> ExtraArgs;
  /// -resource-dir= to add when a command has none ("" to add nothing).
  std::string ResourceDir;
  /// Builds a fresh options provider; called once per TU, because providers
  /// cache configuration files and are not thread-safe.
  std::function<std::unique_ptr<clang::tidy::ClangTidyOptionsProvider>()>
      MakeOptionsProvider;
  /// Called on a worker thread as each job starts (the progress line).
  std::function<void(const TUJob &)> OnStart;
  /// Skip the function bodies of system headers that no check reads
  /// (SystemBodies.h); --no-skip-system-bodies turns it off.
  bool SkipSystemBodies = true;
  /// Facts of other TUs (`--summaries`), handed to the checks as the
  /// `torch.Summaries` option; "" for none.
  std::string SummariesPath;
};

/// Whether a TU with the configuration \p FileOptions skips system bodies:
/// not when findings in system headers are wanted (`SystemHeaders: true`),
/// nor when compiler warnings are (a `clang-diagnostic-*` check): skipped
/// bodies would change which functions count as used, and drop the warnings
/// of the instantiations that only they request.
bool skipsSystemBodies(const RunOptions &Options,
                       const clang::tidy::ClangTidyOptions &FileOptions);

/// What one translation unit produced.
struct TUResult {
  std::string File;
  /// Findings in the order clang-tidy produced them (sort before printing).
  std::vector<Finding> Findings;
  /// The same diagnostics unconverted, for --export-fixes.
  std::vector<clang::tidy::ClangTidyError> Errors;
  /// Checks enabled for this file (after .clang-tidy and --checks).
  std::vector<std::string> EnabledChecks;
  /// The compiler reported an error (the AST was recovered or incomplete).
  bool CompileError = false;
  /// The first compiler error as clang emitted it, `file:line:col: message`
  /// (a missing header: `'eigen3/Eigen/Dense' file not found`).
  std::string FirstCompileError;
  /// The TU could not be processed at all and no diagnostic says why.
  std::string ToolError;
  /// Every file the TU read, absolute (with TUExtras::CollectDependencies).
  std::vector<std::string> Dependencies;
  /// Where each header the TU could not find would have been found: every
  /// directory it was looked for in, joined with its name. A file created
  /// at one of them changes the result (with CollectDependencies).
  std::vector<std::string> AbsentIncludes;
  /// What the TU exports for the cross-TU phase (TUExtras::ExportSummaries),
  /// as JSON text; empty when not asked for.
  std::string SummaryExport;
  /// With TUExtras::Preamble: why the TU could not use the PCH after all
  /// (PreambleGuard.h), "" when it could. The result is then to be dropped.
  std::string PreambleProblem;
};

/// What --audit and the shared preamble add to a TU's run (Audit.cpp).
struct TUExtras {
  /// A precompiled header to load before the TU (-include-pch); "" for none.
  std::string PCHPath;
  /// With PCHPath: what the PCH's build saw, for PreambleGuard.
  const PreambleFacts *Preamble = nullptr;
  /// Fill TUResult::Dependencies, system headers included.
  bool CollectDependencies = false;
  /// Fill TUResult::SummaryExport.
  bool ExportSummaries = false;
  /// The program's facts (the audit's cross-TU phase); overrides
  /// RunOptions::SummariesPath.
  std::string SummariesPath;
};

/// Analyses one job on the calling thread.
TUResult runTU(const TUJob &Job, const RunOptions &Options,
               const TUExtras &Extras = {});

/// The arguments that runTU gives clang for \p Command of \p Job: the
/// command after ClangTool's adjustments (-fsyntax-only, no -o), the
/// configuration's and the options' extra arguments and -resource-dir.
std::vector<std::string>
effectiveArguments(const TUJob &Job,
                   const clang::tooling::CompileCommand &Command,
                   const RunOptions &Options);

/// Analyses every job; the result at index I belongs to Jobs[I] whatever the
/// scheduling was.
std::vector<TUResult> runAll(const std::vector<TUJob> &Jobs,
                             const RunOptions &Options);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_RUNNER_H
