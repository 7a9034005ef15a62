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
};

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
  /// The TU could not be processed at all and no diagnostic says why.
  std::string ToolError;
};

/// Analyses every job; the result at index I belongs to Jobs[I] whatever the
/// scheduling was.
std::vector<TUResult> runAll(const std::vector<TUJob> &Jobs,
                             const RunOptions &Options);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_RUNNER_H
