//===--- CommandLine.cpp - torch-tidy driver ------------------------------===//
//
// The driver's options (llvm::cl) and their parsing into one error line.
//
//===----------------------------------------------------------------------===//

#include "CommandLine.h"
#include "Messages.h"
#include "Terminal.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include <unistd.h>

using namespace llvm;

namespace torchtidy::cli {

cl::OptionCategory Category("torch-tidy options");

cl::list<std::string> SourcePaths(cl::Positional, cl::desc("<source files>"),
                                  cl::cat(Category));
cl::opt<std::string> BuildPath(
    "p", cl::desc("Build directory with compile_commands.json"),
    cl::value_desc("build dir"), cl::cat(Category));
cl::opt<bool> AllFiles("all",
                       cl::desc("Analyse every file of the compile database"),
                       cl::cat(Category));
cl::opt<std::string> Checks(
    "checks",
    cl::desc("Comma-separated globs of checks, '-' to remove (default: "
             "torch-*), applied after any .clang-tidy"),
    cl::cat(Category));
cl::opt<std::string>
    Config("config",
           cl::desc("Configuration in YAML/JSON, instead of .clang-tidy "
                    "files, e.g. --config=\"{Checks: 'torch-*'}\""),
           cl::cat(Category));
cl::opt<std::string>
    ConfigFile("config-file",
               cl::desc("Read the configuration from this file instead of "
                        ".clang-tidy files"),
               cl::value_desc("path"), cl::cat(Category));
cl::opt<unsigned> Jobs("j",
                       cl::desc("Translation units analysed in parallel "
                                "(default 0: one per hardware thread)"),
                       cl::init(0), cl::Prefix, cl::cat(Category));
// A string rather than a cl::values enum: cl reports a bad enum value on
// stderr by itself, in two lines; this way the error is ours and one line.
cl::opt<std::string> FormatName(
    "format", cl::desc("Output format: text (default, clang-tidy's), json, "
                       "sarif (SARIF 2.1.0) or html (a report page)"),
    cl::init("text"), cl::value_desc("text|json|sarif|html"),
    cl::cat(Category));
cl::opt<std::string> DocsURL(
    "docs-url",
    cl::desc("--format=html: link the checks' pages at <url><check>.md "
             "instead of bundling them"),
    cl::value_desc("url"), cl::cat(Category));

cl::opt<bool> Fix("fix",
                  cl::desc("Apply the safe fix-its (those on the warnings)"),
                  cl::cat(Category));
cl::opt<std::string>
    ExportFixes("export-fixes",
                cl::desc("Write the findings and their fix-its as "
                         "clang-apply-replacements YAML"),
                cl::value_desc("filename"), cl::cat(Category));
cl::opt<std::string> WarningsAsErrors(
    "warnings-as-errors",
    cl::desc("Globs of checks whose findings are reported as errors"),
    cl::cat(Category));
cl::opt<bool> ListChecks("list-checks",
                         cl::desc("List the enabled checks and exit"),
                         cl::cat(Category));
cl::opt<bool> Quiet("quiet", cl::desc("No summary and no informational notes"),
                    cl::cat(Category));
cl::opt<std::string> HeaderFilter(
    "header-filter",
    cl::desc("Regex of headers whose findings are shown (default: none, only "
             "the main files)"),
    cl::cat(Category));
cl::list<std::string>
    ExtraArgs("extra-arg", cl::desc("Argument to append to compile commands"),
              cl::cat(Category));
cl::list<std::string> ExtraArgsBefore(
    "extra-arg-before", cl::desc("Argument to prepend to compile commands"),
    cl::cat(Category));

cl::opt<bool> FixUnsafe(
    "fix-unsafe",
    cl::desc("Apply the unsafe fix-its too (those on notes, as clang-tidy's "
             "--fix-notes); implies --fix"),
    cl::cat(Category));
cl::opt<std::string> Explain("explain",
                             cl::desc("Print the documentation of a check"),
                             cl::value_desc("check"), cl::cat(Category));
// --color is registered in parseCommandLine (Terminal.h says why).

cl::opt<bool> Audit("audit",
                    cl::desc("Analyse every TU of -p's database, with shared "
                             "precompiled headers and a per-TU result cache "
                             "(docs/driver.md)"),
                    cl::cat(Category));
cl::opt<std::string> CacheDir(
    "cache-dir",
    cl::desc("Where the shared preambles (and --audit's results) are kept "
             "(default: <build dir>/.torch-tidy-cache, or "
             "$XDG_CACHE_HOME/torch-tidy without a compile database)"),
    cl::value_desc("dir"), cl::cat(Category));
cl::opt<bool> NoPCH("no-pch",
                    cl::desc("Parse every TU in full, without the shared "
                             "preamble of the cache directory"),
                    cl::cat(Category));
cl::opt<bool> NoSkipSystemBodies(
    "no-skip-system-bodies",
    cl::desc("Parse the function bodies of system headers too (by default "
             "those that no check reads are skipped; docs/driver.md)"),
    cl::cat(Category));
cl::opt<bool>
    NoResultCache("no-result-cache",
                  cl::desc("--audit: analyse every TU, even unchanged ones"),
                  cl::cat(Category));
cl::opt<unsigned> AuditMemory(
    "audit-memory",
    cl::desc("--audit: MiB that the parses may use at once (default: 80% of "
             "the available memory)"),
    cl::value_desc("MiB"), cl::init(0), cl::cat(Category));
cl::opt<bool> NoCrossTU(
    "no-cross-tu",
    cl::desc("--audit: no second phase with the program's summaries"),
    cl::cat(Category));
cl::opt<std::string> SummariesPath(
    "summaries",
    cl::desc("Use the summaries of functions defined in other files that an "
             "earlier --audit wrote (its cache directory, or a "
             "summaries.json)"),
    cl::value_desc("file or dir"), cl::cat(Category));
cl::opt<std::string>
    ShardSpec("shard",
              cl::desc("Analyse only part i of N of the TUs, e.g. --shard=2/4 "
                       "(merge the SARIF files with `torch-tidy merge-sarif`)"),
              cl::value_desc("i/N"), cl::cat(Category));

cl::opt<std::string> BaselinePath(
    "baseline",
    cl::desc("Report only the findings that this earlier JSON or SARIF "
             "report does not hold (matched by fingerprint)"),
    cl::value_desc("file"), cl::cat(Category));
cl::opt<std::string> WriteBaselinePath(
    "write-baseline",
    cl::desc("Write every finding of this run, as JSON, to <file>"),
    cl::value_desc("file"), cl::cat(Category));

cl::opt<std::string> DiffBase(
    "diff-base",
    cl::desc("Report only the findings on lines changed since this git ref "
             "(their location or a note's)"),
    cl::value_desc("ref"), cl::cat(Category));
cl::opt<bool> DiffStaged(
    "diff-staged",
    cl::desc("Report only the findings on lines of the staged changes"),
    cl::cat(Category));

/// Parses the command line; on error prints one line and returns false.
bool parseCommandLine(int Argc, const char **Argv) {
  addColorOption(Category);
  cl::HideUnrelatedOptions(Category);
  cl::SetVersionPrinter([](raw_ostream &OS) {
    OS << "torch-tidy " << TORCH_TIDY_VERSION << " (LLVM "
       << LLVM_VERSION_STRING << ")\n";
  });
  // cl reports some errors through the stream it is given and others (a bad
  // option value) straight to stderr; catch both by pointing stderr at a
  // temporary file while parsing, so that the error can be one line of ours.
  std::string Errors;
  raw_string_ostream ErrorStream(Errors);
  SmallString<128> Captured;
  int CaptureFD = -1, SavedStderr = -1;
  if (!sys::fs::createTemporaryFile("torch-tidy-cl", "txt", CaptureFD,
                                    Captured)) {
    errs().flush();
    SavedStderr = ::dup(2);
    ::dup2(CaptureFD, 2);
  }
  bool OK = cl::ParseCommandLineOptions(
      Argc, Argv,
      "torch-tidy: clang-tidy's engine with the torch-* checks for "
      "LibTorch code.\n\n"
      "  torch-tidy [options] <files...> [-- <compiler flags>]\n"
      "  torch-tidy -p <build dir> --all\n",
      &ErrorStream);
  std::string Text = ErrorStream.str();
  if (SavedStderr >= 0) {
    errs().flush();
    ::dup2(SavedStderr, 2);
    ::close(SavedStderr);
    ::close(CaptureFD);
    if (auto Buf = MemoryBuffer::getFile(Captured))
      Text = (*Buf)->getBuffer().str() + Text;
    sys::fs::remove(Captured);
  }
  if (OK) {
    errs() << Text; // cl's warnings, if any
    return true;
  }
  // cl writes "<argv0>: Unknown command line argument '-x'.  Try: ..." and
  // maybe "<argv0>: Did you mean '-y'?": keep the substance, in one line.
  std::string Message;
  SmallVector<StringRef, 4> Lines;
  StringRef(Text).split(Lines, '\n', -1, /*KeepEmpty=*/false);
  for (StringRef Line : Lines) {
    Line = Line.trim();
    size_t Colon = Line.find(": ");
    if (Colon != StringRef::npos &&
        Line.substr(0, Colon).ends_with(sys::path::filename(Argv[0])))
      Line = Line.drop_front(Colon + 2);
    Line = Line.substr(0, Line.find("  Try:"));
    if (!Line.empty())
      Message += (Message.empty() ? "" : " ") + Line.str();
  }
  printError(Message + " (see --help)");
  return false;
}

} // namespace torchtidy::cli
