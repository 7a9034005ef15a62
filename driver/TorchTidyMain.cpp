//===--- TorchTidyMain.cpp - torch-tidy driver ----------------------------===//
//
// `torch-tidy [options] <files...> [-- <compiler flags>]`: clang-tidy's
// engine with the torch module linked in, clang-tidy's command line, and
// text, JSON, SARIF or HTML output that is sorted and independent of -j.
//
// Exit status (docs/driver.md):
//   0  no findings;
//   1  findings (warnings, or warnings promoted by --warnings-as-errors);
//   2  a usage error, or a tool error: a file that could not be analysed
//      (missing, unreadable, not in the database), a TU with compiler
//      errors, a fix that could not be written, --export-fixes failing.
//      2 wins over 1: the findings are still printed.
//
//===----------------------------------------------------------------------===//

#include "Audit.h"
#include "CommandLine.h"
#include "Baseline.h"
#include "ChangedLines.h"
#include "Fingerprint.h"
#include "model/ExternalSummaries.h"
#include "model/ProgramModel.h"
#include "CompileDb.h"
#include "Config.h"
#include "Explain.h"
#include "Finding.h"
#include "FixApplier.h"
#include "HtmlReport.h"
#include "Messages.h"
#include "OutputFormats.h"
#include "ResultGathering.h"
#include "Runner.h"
#include "Shard.h"
#include "Subcommands.h"
#include "Terminal.h"
#include "TorchTidyForceLinker.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Tooling/CompilationDatabase.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include <chrono>
#include <set>
#include <unistd.h>

using namespace llvm;
using namespace torchtidy;
using namespace torchtidy::cli;

namespace {

enum ExitCode { ExitClean = 0, ExitFindings = 1, ExitError = 2 };

enum class OutputFormat { Text, JSON, SARIF, HTML };
OutputFormat Format = OutputFormat::Text;


/// clang's builtin headers: next to the executable when installed with clang,
/// else those of the LLVM this was built against.
std::string resourceDir(const char *Argv0) {
  static int Anchor;
  std::string Own = clang::CompilerInvocation::GetResourcesPath(
      Argv0, reinterpret_cast<void *>(&Anchor));
  SmallString<256> Probe(Own);
  sys::path::append(Probe, "include", "stddef.h");
  if (sys::fs::exists(Probe))
    return "";
  return TORCH_TIDY_CLANG_RESOURCE_DIR;
}

/// --cache-dir, else `.torch-tidy-cache` in the compile database's
/// directory, else $XDG_CACHE_HOME/torch-tidy (~/.cache/torch-tidy); "" when
/// there is none of these.
std::string cacheDir(StringRef DatabaseDir) {
  if (!CacheDir.empty())
    return normalizePath(CacheDir);
  if (!DatabaseDir.empty())
    return normalizePath(DatabaseDir) + "/.torch-tidy-cache";
  SmallString<256> User;
  if (!sys::path::cache_directory(User)) // honours XDG_CACHE_HOME
    return "";
  sys::path::append(User, "torch-tidy");
  return normalizePath(User);
}

AuditOptions auditOptions(const char *Argv0, StringRef DatabaseDir,
                          RunFigures &Figures) {
  AuditOptions A;
  if (Audit)
    A.Stats = &Figures.Audit.emplace();
  A.CacheDir = cacheDir(DatabaseDir);
  A.UsePCH = !NoPCH;
  // The cache keeps findings, not the raw diagnostics that fixes need.
  A.UseResultCache =
      !NoResultCache && !Fix && !FixUnsafe && ExportFixes.empty();
  A.MemoryBudget = uint64_t(AuditMemory) << 20;
  A.ToolId = toolIdentity(Argv0);
  A.Progress = Format == OutputFormat::Text;
  A.CrossTU = !NoCrossTU;
  return A;
}

/// A plain run shares the preambles of the cache directory (SharedPch.h):
/// it reuses what an audit or an earlier run left there, and builds a
/// missing one once. --audit adds the result cache, the cross-TU phase and
/// the summary.
std::vector<TUResult> runTUs(const std::vector<TUJob> &TUs,
                             const RunOptions &Options, AuditOptions A) {
  if (Audit)
    return runAudit(TUs, Options, A);
  if (NoPCH || A.CacheDir.empty())
    return runAll(TUs, Options);
  A.UseResultCache = false;
  A.CrossTU = false;
  A.Summary = false;
  A.Progress = false;
  A.MinSharers = 1;
  return runAudit(TUs, Options, A);
}

void printReport(const Report &R, const HtmlOptions &Html) {
  switch (Format) {
  case OutputFormat::Text:
    printText(R, outs());
    break;
  case OutputFormat::JSON:
    printJSON(R, outs());
    break;
  case OutputFormat::SARIF:
    printSARIF(R, outs());
    break;
  case OutputFormat::HTML:
    printHTML(R, Html, outs());
    break;
  }
  outs().flush();
}

int run(int Argc, const char **Argv) {
  // Everything after `--` is the compiler flags for files without a
  // compile_commands.json entry; cut it off before parsing the options.
  std::string FixedError;
  SmallString<256> Cwd;
  sys::fs::current_path(Cwd);
  std::unique_ptr<clang::tooling::FixedCompilationDatabase> FixedDB =
      clang::tooling::FixedCompilationDatabase::loadFromCommandLine(
          Argc, Argv, FixedError, Cwd);
  if (!FixedError.empty()) {
    printError("invalid compiler flags after '--': " + FixedError);
    return ExitError;
  }
  if (!parseCommandLine(Argc, Argv))
    return ExitError;
  setQuiet(Quiet);
  ColorMode Color;
  if (!parsedColorMode(Color))
    return ExitError;
  if (!Explain.empty()) {
    outs().enable_colors(wantsColor(Color, outs()));
    return explainCheck(Explain, Argv[0], outs());
  }
  if (FormatName == "text") {
    Format = OutputFormat::Text;
  } else if (FormatName == "json") {
    Format = OutputFormat::JSON;
  } else if (FormatName == "sarif") {
    Format = OutputFormat::SARIF;
  } else if (FormatName == "html") {
    Format = OutputFormat::HTML;
  } else {
    printError("unknown --format '" + FormatName +
               "' (expected text, json, sarif or html)");
    return ExitError;
  }
  if (!DocsURL.empty() && Format != OutputFormat::HTML) {
    printError("--docs-url needs --format=html");
    return ExitError;
  }

  if (!ExportFixes.empty())
    if (std::string Problem = checkExportPath(ExportFixes); !Problem.empty()) {
      printError(Problem);
      return ExitError;
    }

  ConfigRequest Request;
  if (Checks.getNumOccurrences())
    Request.Checks = Checks;
  if (WarningsAsErrors.getNumOccurrences())
    Request.WarningsAsErrors = WarningsAsErrors;
  if (HeaderFilter.getNumOccurrences())
    Request.HeaderFilter = HeaderFilter;
  Request.ConfigText = Config;
  Request.ConfigFile = ConfigFile;
  ProviderFactory Providers = makeProviderFactory(Request);
  if (!Providers)
    return ExitError;

  if (Request.Checks)
    warnAboutUnknownChecks(*Request.Checks);
  // The options of the first file (or of the current directory) decide
  // whether anything is enabled at all.
  SmallString<256> Probe;
  if (!SourcePaths.empty()) {
    Probe = normalizePath(SourcePaths.front());
  } else {
    sys::fs::current_path(Probe);
    sys::path::append(Probe, "dummy.cpp");
  }
  std::vector<std::string> Enabled = enabledChecks(Providers, Probe);
  if (std::vector<std::string> Bad = takeConfigErrors(); !Bad.empty()) {
    for (const std::string &Message : Bad)
      printError(Message);
    return ExitError;
  }
  if (ListChecks) {
    if (Enabled.empty()) {
      printError("no checks enabled");
      return ExitError;
    }
    listChecks(Enabled, outs());
    return ExitClean;
  }
  if (Enabled.empty()) {
    printError("no checks enabled: the checks globs (" +
               (Request.Checks ? "--checks='" + *Request.Checks + "'"
                               : std::string("configuration")) +
               ") match no registered check; see --list-checks");
    return ExitError;
  }

  if (Audit) {
    if (BuildPath.empty()) {
      printError("--audit needs -p <build dir>");
      return ExitError;
    }
    AllFiles = true;
    if (!SummariesPath.empty()) {
      printError("--summaries is for a plain run; --audit computes them");
      return ExitError;
    }
  } else if (NoResultCache || AuditMemory || NoCrossTU) {
    printError("--no-result-cache, --audit-memory and --no-cross-tu need "
               "--audit");
    return ExitError;
  }
  std::optional<ChangedLines> Changed;
  if (!DiffBase.empty() && DiffStaged) {
    printError("--diff-base and --diff-staged exclude each other");
    return ExitError;
  }
  if (!DiffBase.empty() || DiffStaged) {
    Expected<ChangedLines> Lines = changedLines(Cwd, DiffBase);
    if (!Lines) {
      printError(toString(Lines.takeError()));
      return ExitError;
    }
    Changed = std::move(*Lines);
  }
  std::optional<Baseline> Earlier;
  if (!BaselinePath.empty()) {
    Expected<Baseline> Loaded = loadBaseline(BaselinePath);
    if (!Loaded) {
      printError(toString(Loaded.takeError()));
      return ExitError;
    }
    Earlier = std::move(*Loaded);
  }
  if (!SummariesPath.empty()) {
    auto Loaded = clang::tidy::torch::ExternalSummaries::load(SummariesPath);
    if (!Loaded) {
      printError("--summaries: " + toString(Loaded.takeError()));
      return ExitError;
    }
  }
  Shard Part;
  if (!ShardSpec.empty())
    if (std::string Problem = parseShard(ShardSpec, Part); !Problem.empty()) {
      printError(Problem);
      return ExitError;
    }
  if (SourcePaths.empty() && !AllFiles) {
    printError("no input files (give files, or -p <build dir> --all)");
    return ExitError;
  }
  if (AllFiles && BuildPath.empty()) {
    printError("--all needs -p <build dir>");
    return ExitError;
  }

  // The compile database: -p, or the nearest one above the first file when
  // neither -p nor `--` is given (as clang-tidy does).
  std::unique_ptr<clang::tooling::CompilationDatabase> Database;
  CommandSources Sources;
  std::string DatabaseDir = BuildPath;
  bool Explicit = !BuildPath.empty();
  if (DatabaseDir.empty() && !FixedDB && !SourcePaths.empty())
    DatabaseDir = findCompileDatabaseDir(normalizePath(SourcePaths.front()));
  if (!DatabaseDir.empty()) {
    auto Loaded = loadCompileDatabase(DatabaseDir);
    if (!Loaded) {
      printError(toString(Loaded.takeError()));
      return ExitError;
    }
    Database = std::move(*Loaded);
    Sources.Database = Database.get();
    SmallString<256> Path(DatabaseDir);
    sys::path::append(Path, "compile_commands.json");
    Sources.DatabasePath = std::string(Path);
  }
  Sources.Fixed = FixedDB.get();
  if (!Explicit && Database && !Quiet)
    printNote("using " + Sources.DatabasePath);

  // The translation units, each file once, in the order given.
  std::vector<std::string> Files(SourcePaths.begin(), SourcePaths.end());
  if (AllFiles) {
    std::vector<std::string> All = Database->getAllFiles();
    llvm::sort(All);
    Files.insert(Files.end(), All.begin(), All.end());
  }
  Report R;
  R.BaseDir = std::string(Cwd);
  std::vector<TUJob> TUs;
  StringSet<> Seen;
  for (const std::string &File : Files) {
    TUJob Job;
    if (std::string Problem = resolveJob(File, Sources, Job);
        !Problem.empty()) {
      printError(Problem);
      R.ToolErrors.push_back({normalizePath(File), Problem});
      continue;
    }
    if (!Sources.Database && !Sources.Fixed && !Quiet)
      printNote("no compilation database and no '--' flags for '" + File +
                "'; analysing it without compiler flags");
    if (Seen.insert(Job.File).second)
      TUs.push_back(std::move(Job));
  }

  if (!ShardSpec.empty())
    selectShard(TUs, Part);

  RunOptions Options;
  Options.Jobs = Jobs;
  Options.ExtraArgs.assign(ExtraArgs.begin(), ExtraArgs.end());
  Options.ExtraArgsBefore.assign(ExtraArgsBefore.begin(), ExtraArgsBefore.end());
  Options.ResourceDir = resourceDir(Argv[0]);
  Options.MakeOptionsProvider = Providers;
  Options.SkipSystemBodies = !NoSkipSystemBodies;
  if (!SummariesPath.empty()) {
    llvm::SmallString<256> Absolute(SummariesPath);
    llvm::sys::fs::make_absolute(Absolute);
    Options.SummariesPath = std::string(Absolute);
  }
  ProgressLine Progress(TUs.size(),
                        Format == OutputFormat::Text && TUs.size() > 1);
  Options.OnStart = [&Progress](const TUJob &Job) { Progress.start(Job.File); };
  RunFigures Figures{unsigned(TUs.size()), Jobs};
  auto Start = std::chrono::steady_clock::now();
  std::vector<TUResult> Results =
      runTUs(TUs, Options, auditOptions(Argv[0], DatabaseDir, Figures));
  Figures.WallSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - Start)
          .count();
  Progress.finish();
  for (const std::string &Message : takeConfigErrors()) {
    printError(Message); // a .clang-tidy of another directory
    R.ToolErrors.push_back({"", Message});
  }

  GatheredFixes Gathered = gatherResults(Results, Fix || FixUnsafe, R);
  std::vector<Finding> &Fixable = Gathered.Fixable;
  std::vector<Finding> &UnsafeFixable = Gathered.UnsafeFixable;
  SourceCache Texts;
  addFingerprints(R.Findings, R.BaseDir, Texts);
  bool Failed = !R.ToolErrors.empty();
  if (Format != OutputFormat::Text || !WriteBaselinePath.empty())
    addSourceDigests(R);
  if (!WriteBaselinePath.empty())
    if (Error E = writeBaseline(R, WriteBaselinePath)) {
      printError(toString(std::move(E)));
      Failed = true;
    }
  if (Earlier)
    applyBaseline(R, *Earlier);
  if (Changed)
    keepChanged(R.Findings, *Changed);

  // Colours only in the text format, so that JSON and SARIF stay plain.
  outs().enable_colors(Format == OutputFormat::Text &&
                       wantsColor(Color, outs()));
  printReport(R, {findDocsDir(Argv[0]), DocsURL, Figures, ""});

  if (!ExportFixes.empty()) {
    std::string Main = TUs.empty() ? "" : TUs.front().File;
    if (!exportFixes(ExportFixes, Main, std::move(Gathered.RawErrors)))
      Failed = true;
  }
  if (FixUnsafe)
    Fixable.insert(Fixable.end(), UnsafeFixable.begin(), UnsafeFixable.end());
  else if (Fix && !UnsafeFixable.empty())
    printNote(formatv("{0} unsafe fix-it(s) not applied; --fix-unsafe "
                      "applies them (see each check's documentation)",
                      UnsafeFixable.size()));
  if (Fix || FixUnsafe) {
    sortAndUnique(Fixable);
    FixStats Stats = applyFixes(Fixable);
    printNote(formatv("applied {0} fix-it(s) to {1} file(s)",
                      Stats.FixesApplied, Stats.FilesWritten));
    if (Stats.Failures)
      Failed = true;
  }

  unsigned Warnings = 0, ErrorCount = 0;
  for (const Finding &F : R.Findings)
    (F.Severity == Level::Error ? ErrorCount : Warnings)++;
  if (Format == OutputFormat::Text)
    printNote(formatv("{0} warning(s) and {1} error(s) in {2} file(s)",
                      Warnings, ErrorCount, TUs.size()));

  if (Failed)
    return ExitError;
  return R.Findings.empty() ? ExitClean : ExitFindings;
}

} // namespace

int main(int Argc, const char **Argv) {
  // Installs the crash handlers, and a SIGPIPE handler that exits quietly
  // (`torch-tidy ... | head -1`).
  InitLLVM X(Argc, Argv);
  if (std::optional<int> Status = runSubcommand(Argc, Argv))
    return *Status;
  int Status = run(Argc, Argv);
  outs().flush();
  if (outs().has_error()) {
    outs().clear_error(); // e.g. EPIPE: nothing more to say
    return ExitError;
  }
  return Status;
}
