//===--- CommandLine.h - torch-tidy driver ----------------------*- C++ -*-===//
//
// The driver's command-line options, defined in CommandLine.cpp; docs/driver.md
// describes each.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_COMMANDLINE_H
#define TORCH_TIDY_DRIVER_COMMANDLINE_H

#include "llvm/Support/CommandLine.h"
#include <string>

namespace torchtidy::cli {

extern llvm::cl::OptionCategory Category;
extern llvm::cl::list<std::string> SourcePaths;
extern llvm::cl::opt<std::string> BuildPath;
extern llvm::cl::opt<bool> AllFiles;
extern llvm::cl::opt<std::string> Checks;
extern llvm::cl::opt<std::string> Config;
extern llvm::cl::opt<std::string> ConfigFile;
extern llvm::cl::opt<unsigned> Jobs;
extern llvm::cl::opt<std::string> FormatName;
extern llvm::cl::opt<std::string> DocsURL;
extern llvm::cl::opt<bool> Fix;
extern llvm::cl::opt<std::string> ExportFixes;
extern llvm::cl::opt<std::string> WarningsAsErrors;
extern llvm::cl::opt<bool> ListChecks;
extern llvm::cl::opt<bool> Quiet;
extern llvm::cl::opt<std::string> HeaderFilter;
extern llvm::cl::list<std::string> ExtraArgs;
extern llvm::cl::list<std::string> ExtraArgsBefore;
extern llvm::cl::opt<bool> FixUnsafe;
extern llvm::cl::opt<std::string> Explain;
extern llvm::cl::opt<bool> Audit;
extern llvm::cl::opt<std::string> CacheDir;
extern llvm::cl::opt<bool> NoPCH;
extern llvm::cl::opt<bool> NoSkipSystemBodies;
extern llvm::cl::opt<bool> NoResultCache;
extern llvm::cl::opt<unsigned> AuditMemory;
extern llvm::cl::opt<bool> NoCrossTU;
extern llvm::cl::opt<std::string> SummariesPath;
extern llvm::cl::opt<std::string> ShardSpec;
extern llvm::cl::opt<std::string> BaselinePath;
extern llvm::cl::opt<std::string> WriteBaselinePath;
extern llvm::cl::opt<std::string> DiffBase;
extern llvm::cl::opt<bool> DiffStaged;

/// Parses the command line; on error prints one line and returns false.
bool parseCommandLine(int Argc, const char **Argv);

} // namespace torchtidy::cli

#endif // TORCH_TIDY_DRIVER_COMMANDLINE_H
