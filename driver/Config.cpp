//===--- Config.cpp - torch-tidy driver -----------------------------------===//

#include "Config.h"

#include "Messages.h"
#include "OutputFormats.h"
#include "clang-tidy/ClangTidy.h"
#include "clang-tidy/GlobList.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/VirtualFileSystem.h"
#include "llvm/Support/raw_ostream.h"
#include <mutex>
#include <set>

using namespace llvm;
using namespace clang::tidy;

namespace torchtidy {

/// Parses a configuration, turning YAML diagnostics into one line.
static std::optional<ClangTidyOptions> parseConfig(StringRef Text,
                                                   StringRef Origin) {
  std::string Diag;
  auto Handler = [&](const SMDiagnostic &D) {
    if (Diag.empty())
      Diag = (Twine(D.getLineNo()) + ":" + Twine(D.getColumnNo() + 1) + ": " +
              D.getMessage())
                 .str();
  };
  ErrorOr<ClangTidyOptions> Parsed = parseConfigurationWithDiags(
      MemoryBufferRef(Text, Origin), Handler);
  if (!Parsed) {
    printError("invalid configuration in " + Origin + ": " +
               (Diag.empty() ? Parsed.getError().message() : Diag));
    return std::nullopt;
  }
  return std::move(*Parsed);
}

static std::mutex ConfigErrorsMutex;
static std::set<std::string> ConfigErrors;

/// Parses a `.clang-tidy` file. On error, records one line (reported once by
/// takeConfigErrors) and returns an empty configuration, which ends the
/// search upwards: clang-tidy would print a multi-line YAML error for every
/// TU and silently use the parent directory's file instead.
static ErrorOr<ClangTidyOptions> parseConfigFile(MemoryBufferRef Buffer) {
  std::string Diag;
  auto Handler = [&](const SMDiagnostic &D) {
    if (Diag.empty())
      Diag = (Twine(D.getLineNo()) + ":" + Twine(D.getColumnNo() + 1) + ": " +
              D.getMessage())
                 .str();
  };
  ErrorOr<ClangTidyOptions> Parsed =
      parseConfigurationWithDiags(Buffer, Handler);
  if (Parsed)
    return Parsed;
  std::lock_guard<std::mutex> Lock(ConfigErrorsMutex);
  ConfigErrors.insert(
      ("invalid configuration in '" + Buffer.getBufferIdentifier() + "': " +
       (Diag.empty() ? Parsed.getError().message() : Diag))
          .str());
  return ClangTidyOptions();
}

std::vector<std::string> takeConfigErrors() {
  std::lock_guard<std::mutex> Lock(ConfigErrorsMutex);
  std::vector<std::string> Out(ConfigErrors.begin(), ConfigErrors.end());
  ConfigErrors.clear();
  return Out;
}

namespace {
/// FileOptionsProvider reading `.clang-tidy` with parseConfigFile. (Its
/// constructor that takes handlers leaves the file system unset in LLVM 19,
/// so the handlers are replaced here instead.)
class DotClangTidyProvider : public FileOptionsProvider {
public:
  DotClangTidyProvider(const ClangTidyOptions &Defaults,
                       const ClangTidyOptions &Overrides,
                       IntrusiveRefCntPtr<vfs::FileSystem> FS)
      : FileOptionsProvider(ClangTidyGlobalOptions(), Defaults, Overrides,
                            std::move(FS)) {
    ConfigHandlers.clear();
    ConfigHandlers.emplace_back(".clang-tidy", parseConfigFile);
  }
};
} // namespace

ProviderFactory makeProviderFactory(const ConfigRequest &Request) {
  ClangTidyOptions Defaults;
  Defaults.Checks = DefaultChecks;
  Defaults.WarningsAsErrors = "";
  Defaults.HeaderFilterRegex = "";
  Defaults.SystemHeaders = false;
  Defaults.FormatStyle = "none";
  if (std::optional<std::string> User = sys::Process::GetEnv("USER"))
    Defaults.User = *User;
  Defaults = ClangTidyOptions::getDefaults().mergeWith(Defaults, 0);

  ClangTidyOptions Overrides;
  Overrides.Checks = Request.Checks;
  Overrides.WarningsAsErrors = Request.WarningsAsErrors;
  Overrides.HeaderFilterRegex = Request.HeaderFilter;

  std::optional<ClangTidyOptions> Explicit;
  if (!Request.ConfigText.empty() && !Request.ConfigFile.empty()) {
    printError("--config and --config-file are mutually exclusive");
    return nullptr;
  }
  if (!Request.ConfigText.empty()) {
    Explicit = parseConfig(Request.ConfigText, "--config");
    if (!Explicit)
      return nullptr;
  } else if (!Request.ConfigFile.empty()) {
    auto Buf = MemoryBuffer::getFile(Request.ConfigFile, /*IsText=*/true);
    if (!Buf) {
      printError("--config-file: cannot read '" + Request.ConfigFile +
                 "': " + Buf.getError().message());
      return nullptr;
    }
    Explicit = parseConfig((*Buf)->getBuffer(), "'" + Request.ConfigFile + "'");
    if (!Explicit)
      return nullptr;
  }

  return [=]() -> std::unique_ptr<ClangTidyOptionsProvider> {
    IntrusiveRefCntPtr<vfs::FileSystem> FS(vfs::createPhysicalFileSystem());
    if (Explicit)
      return std::make_unique<ConfigOptionsProvider>(
          ClangTidyGlobalOptions(), Defaults, *Explicit, Overrides, FS);
    return std::make_unique<DotClangTidyProvider>(Defaults, Overrides, FS);
  };
}

std::vector<std::string> registeredChecks() {
  std::vector<std::string> Names;
  for (const auto &Entry :
       getAllChecksAndOptions(/*AllowEnablingAnalyzerAlphaCheckers=*/false)
           .Names)
    Names.push_back(Entry.getKey().str());
  llvm::sort(Names);
  return Names;
}

void warnAboutUnknownChecks(StringRef Checks) {
  std::vector<std::string> Known = registeredChecks();
  SmallVector<StringRef, 8> Globs;
  Checks.split(Globs, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (StringRef Glob : Globs) {
    Glob = Glob.trim();
    StringRef Pattern = Glob;
    Pattern.consume_front("-");
    Pattern = Pattern.trim();
    if (Pattern.empty() || Pattern.starts_with("clang-diagnostic-"))
      continue;
    GlobList Matcher(Pattern);
    if (llvm::none_of(Known,
                      [&](const std::string &N) { return Matcher.contains(N); }))
      printWarning("unknown check '" + Pattern + "' in --checks: no " +
                   "registered check matches it (see --list-checks)");
  }
}

std::vector<std::string> enabledChecks(const ProviderFactory &Factory,
                                       StringRef File) {
  std::unique_ptr<ClangTidyOptionsProvider> Provider = Factory();
  return getCheckNames(Provider->getOptions(File),
                       /*AllowEnablingAnalyzerAlphaCheckers=*/false);
}

void listChecks(const std::vector<std::string> &Enabled, raw_ostream &OS) {
  size_t Width = 0;
  for (const std::string &C : Enabled)
    Width = std::max(Width, C.size());
  OS << "Enabled checks:\n";
  for (const std::string &C : Enabled) {
    std::string Description = describeCheck(C);
    OS << "    " << C;
    if (!Description.empty())
      OS << std::string(Width - C.size() + 2, ' ') << Description;
    OS << '\n';
  }
  OS << '\n';
}

} // namespace torchtidy
