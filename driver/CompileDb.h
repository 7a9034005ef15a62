//===--- CompileDb.h - torch-tidy driver ------------------------*- C++ -*-===//
//
// Finding the compile command of each input file: loading and validating
// compile_commands.json (with one-line errors instead of the YAML parser's
// multi-line ones), the `--` fallback flags, and the checks on input paths.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_COMPILEDB_H
#define TORCH_TIDY_DRIVER_COMPILEDB_H

#include "clang/Tooling/CompilationDatabase.h"
#include "llvm/Support/Error.h"
#include <memory>
#include <string>
#include <vector>

namespace torchtidy {

/// Loads `<BuildDir>/compile_commands.json`. Fails with a one-line message when
/// the directory or the file is missing, the JSON is malformed, or an entry
/// lacks `directory`, `file` or `command`/`arguments`, or has a relative
/// `directory`.
llvm::Expected<std::unique_ptr<clang::tooling::CompilationDatabase>>
loadCompileDatabase(llvm::StringRef BuildDir);

/// The directory of the nearest compile_commands.json above \p File, or "".
std::string findCompileDatabaseDir(llvm::StringRef File);

/// Checks that \p Path names a readable regular file. Returns the problem in
/// one line ("'x.cpp': no such file or directory"), or "" when it is fine.
std::string checkInputFile(llvm::StringRef Path);

/// One translation unit to analyse: an input file and its compile commands
/// (a file can be compiled more than once, e.g. with different flags).
struct TUJob {
  std::string File; // absolute
  std::vector<clang::tooling::CompileCommand> Commands;
};

/// Where the compile commands come from.
struct CommandSources {
  /// compile_commands.json from -p (or found above the first file).
  clang::tooling::CompilationDatabase *Database = nullptr;
  std::string DatabasePath; // for messages
  /// Flags after `--`; used for files that are not in Database.
  clang::tooling::CompilationDatabase *Fixed = nullptr;
};

/// Resolves the commands of \p File. Returns "" and fills \p Job, or returns a
/// one-line error (the file is skipped).
std::string resolveJob(llvm::StringRef File, const CommandSources &Sources,
                       TUJob &Job);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_COMPILEDB_H
