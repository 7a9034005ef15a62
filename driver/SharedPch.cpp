//===--- SharedPch.cpp - torch-tidy driver --------------------------------===//

#include "SharedPch.h"

#include "Finding.h"
#include "PreambleGuard.h"
#include "PreambleScan.h"
#include "SystemBodies.h"
#include "clang/Basic/Version.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/FrontendActions.h"
#include "clang/Frontend/Utils.h"
#include "clang/Lex/HeaderSearch.h"
#include "clang/Lex/Preprocessor.h"
#include "clang/Lex/PreprocessorOptions.h"
#include "clang/Tooling/Tooling.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/VirtualFileSystem.h"
#include <chrono>

using namespace llvm;
using namespace clang;

namespace torchtidy {
namespace {

/// Keeps the first warning or error of the build, with its location.
class FirstProblem : public DiagnosticConsumer {
public:
  void HandleDiagnostic(DiagnosticsEngine::Level Level,
                        const Diagnostic &Info) override {
    DiagnosticConsumer::HandleDiagnostic(Level, Info); // counts them
    if (Level < DiagnosticsEngine::Warning || !First.empty())
      return;
    SmallString<128> Text;
    Info.FormatDiagnostic(Text);
    if (Info.hasSourceManager() && Info.getLocation().isValid()) {
      PresumedLoc P =
          Info.getSourceManager().getPresumedLoc(Info.getLocation());
      if (P.isValid())
        First = formatv("{0}:{1}:{2}: ", P.getFilename(), P.getLine(),
                        P.getColumn())
                    .str();
    }
    First += Text.str().str();
  }
  std::string First;
};

/// Every file the build reads, system headers included.
class AllDependencies : public DependencyCollector {
  bool needSystemDependencies() override { return true; }
};

struct BuildOutcome {
  std::shared_ptr<AllDependencies> Dependencies =
      std::make_shared<AllDependencies>();
  std::vector<std::string> Unguarded;
  PreambleFacts Facts;
};

class PrefixPCHAction : public GeneratePCHAction {
public:
  PrefixPCHAction(BuildOutcome &Outcome, bool SkipBodies)
      : Outcome(Outcome), SkipBodies(SkipBodies) {}

  bool BeginInvocation(CompilerInstance &CI) override {
    CI.addDependencyCollector(Outcome.Dependencies);
    return GeneratePCHAction::BeginInvocation(CI);
  }
  bool BeginSourceFileAction(CompilerInstance &CI) override {
    if (!GeneratePCHAction::BeginSourceFileAction(CI))
      return false;
    CI.getPreprocessor().addPPCallbacks(std::make_unique<PreambleRecorder>(
        CI.getPreprocessor(), Outcome.Facts));
    return true;
  }
  std::unique_ptr<ASTConsumer> CreateASTConsumer(CompilerInstance &CI,
                                                 StringRef InFile) override {
    std::unique_ptr<ASTConsumer> Writer =
        GeneratePCHAction::CreateASTConsumer(CI, InFile);
    return SkipBodies && Writer ? skipSystemBodies(std::move(Writer))
                                : std::move(Writer);
  }
  void EndSourceFileAction() override {
    // A TU includes the prefix headers again after the PCH: that is a no-op
    // only for headers with an include guard or #pragma once.
    CompilerInstance &CI = getCompilerInstance();
    const HeaderSearch &HS = CI.getPreprocessor().getHeaderSearchInfo();
    for (const std::string &Header : Outcome.Facts.Headers)
      if (auto File = CI.getFileManager().getOptionalFileRef(Header))
        if (!HS.isFileMultipleIncludeGuarded(*File))
          Outcome.Unguarded.push_back(Header);
    GeneratePCHAction::EndSourceFileAction();
  }

private:
  BuildOutcome &Outcome;
  bool SkipBodies;
};

class PrefixPCHFactory : public tooling::FrontendActionFactory {
public:
  PrefixPCHFactory(std::string Output, BuildOutcome &Outcome, bool SkipBodies)
      : Output(std::move(Output)), Outcome(Outcome), SkipBodies(SkipBodies) {}

  std::unique_ptr<FrontendAction> create() override {
    return std::make_unique<PrefixPCHAction>(Outcome, SkipBodies);
  }

  bool runInvocation(std::shared_ptr<CompilerInvocation> Invocation,
                     FileManager *Files,
                     std::shared_ptr<PCHContainerOperations> PCHContainerOps,
                     DiagnosticConsumer *DiagConsumer) override {
    // As Runner.cpp sets up every TU: the PCH must see the same macros.
    Invocation->getPreprocessorOpts().SetUpStaticAnalyzer = true;
    Invocation->getDiagnosticOpts().ShowCarets = false; // no "N generated"
    // Record content hashes, so that a header that is only touched does not
    // invalidate the PCH when a TU loads it.
    Invocation->getHeaderSearchOpts().ValidateASTInputFilesContent = true;
    Invocation->getFrontendOpts().OutputFile = Output;
    if (SkipBodies)
      enableBodySkipping(*Invocation);
    // The templates that the headers use are instantiated once, in the PCH,
    // rather than at the end of every TU (as clang-cl's /Yc does). A TU
    // whose meaning that would change (a main-file declaration found at the
    // point of instantiation) is ill-formed, no diagnostic required; if
    // clang reports it, the TU is parsed in full.
    Invocation->getLangOpts().PCHInstantiateTemplates = true;
    return FrontendActionFactory::runInvocation(
        std::move(Invocation), Files, std::move(PCHContainerOps), DiagConsumer);
  }

private:
  std::string Output;
  BuildOutcome &Outcome;
  bool SkipBodies;
};

std::optional<std::string> digestOfFile(StringRef Path) {
  auto Buffer = MemoryBuffer::getFile(Path, /*IsText=*/false,
                                      /*RequiresNullTerminator=*/false);
  if (!Buffer)
    return std::nullopt;
  return digestOf((*Buffer)->getBuffer());
}

bool writeText(StringRef Path, StringRef Text) {
  Error E = writeToOutput(Path, [&](raw_ostream &OS) {
    OS << Text;
    return Error::success();
  });
  if (!E)
    return true;
  consumeError(std::move(E));
  return false;
}

std::vector<std::string> stringsOf(const json::Object &O, StringRef Key,
                                   bool &OK) {
  std::vector<std::string> Out;
  const json::Array *A = O.getArray(Key);
  OK = OK && A;
  if (A)
    for (const json::Value &V : *A) {
      std::optional<StringRef> S = V.getAsString();
      OK = OK && S;
      if (S)
        Out.push_back(S->str());
    }
  return Out;
}

/// Removes the files of earlier builds (a process that still has one open
/// keeps reading it).
void removeOldBuilds(StringRef Dir, StringRef KeepPCH, StringRef KeepWords) {
  std::error_code EC;
  for (sys::fs::directory_iterator It(Dir, EC), End; It != End && !EC;
       It.increment(EC)) {
    StringRef Path = It->path();
    if (Path.ends_with(".pch") && Path != KeepPCH)
      sys::fs::remove(Path);
    if (sys::path::filename(Path).starts_with("words-") && Path != KeepWords)
      sys::fs::remove(Path);
  }
}

constexpr int ManifestVersion = 2;

} // namespace

static std::string familyDir(const SharedPCH::Request &R) {
  json::Array Key{R.ToolId, getClangFullVersion(),
                  R.SkipBodies ? "skip-system-bodies" : "all-bodies"};
  for (const std::string &Arg : R.KeyArgs)
    Key.push_back(Arg);
  SmallString<256> Path(R.CacheDir);
  sys::path::append(
      Path, "pch", digestOf(formatv("{0}", json::Value(std::move(Key))).str()));
  return std::string(Path);
}

std::vector<std::vector<std::string>>
SharedPCH::cachedPrefixes(const Request &R) {
  std::vector<std::vector<std::string>> Found;
  std::error_code EC;
  for (sys::fs::directory_iterator It(familyDir(R), EC), End; It != End && !EC;
       It.increment(EC)) {
    auto Buffer = MemoryBuffer::getFile(It->path() + "/manifest.json");
    if (!Buffer)
      continue;
    Expected<json::Value> Parsed = json::parse((*Buffer)->getBuffer());
    if (!Parsed) {
      consumeError(Parsed.takeError());
      continue;
    }
    bool OK = true;
    if (const json::Object *O = Parsed->getAsObject()) {
      std::vector<std::string> Prefix = stringsOf(*O, "prefix", OK);
      if (OK && !Prefix.empty())
        Found.push_back(std::move(Prefix));
    }
  }
  llvm::sort(Found);
  return Found;
}

SharedPCH::SharedPCH(Request R, FileDigests &Digests)
    : Req(std::move(R)), Digests(Digests) {
  SmallString<256> Path(familyDir(Req));
  sys::path::append(Path, digestOf(join(Req.Includes, "\n")));
  Dir = std::string(Path);
  PrefixPath = Dir + "/prefix.h";
  ManifestPath = Dir + "/manifest.json";
}

SharedPCH::State SharedPCH::check() {
  Inputs.clear();
  Facts.reset();
  auto Buffer = MemoryBuffer::getFile(ManifestPath);
  if (!Buffer)
    return State::Missing;
  Expected<json::Value> Parsed = json::parse((*Buffer)->getBuffer());
  const json::Object *Manifest = Parsed ? Parsed->getAsObject() : nullptr;
  if (!Parsed)
    consumeError(Parsed.takeError());
  const json::Array *Files = Manifest ? Manifest->getArray("inputs") : nullptr;
  std::optional<bool> Usable =
      Manifest ? Manifest->getBoolean("usable") : std::nullopt;
  if (!Files || !Usable || Manifest->getInteger("version") != ManifestVersion) {
    Reason = "its manifest is unreadable";
    return State::Stale;
  }
  std::vector<std::string> Listed;
  for (const json::Value &Entry : *Files) {
    const json::Object *O = Entry.getAsObject();
    std::optional<StringRef> File = O ? O->getString("file") : std::nullopt;
    std::optional<StringRef> Digest = O ? O->getString("digest") : std::nullopt;
    if (!File || !Digest) {
      Reason = "its manifest is unreadable";
      return State::Stale;
    }
    std::optional<std::string> Now = Digests.get(*File);
    if (!Now) {
      Reason = ("'" + *File + "' is gone").str();
      return State::Stale;
    }
    if (*Now != *Digest) {
      Reason = ("'" + *File + "' changed").str();
      return State::Stale;
    }
    Listed.push_back(File->str());
  }
  if (!*Usable) {
    Reason = Manifest->getString("reason").value_or("").str();
    return State::Unusable;
  }
  if (!load(*Manifest)) {
    Reason = "the precompiled header or its facts are missing or damaged";
    return State::Stale;
  }
  Inputs = std::move(Listed);
  return State::Ready;
}

bool SharedPCH::load(const json::Object &Manifest) {
  std::optional<StringRef> PCHFile = Manifest.getString("pch");
  std::optional<StringRef> PCHDigest = Manifest.getString("pchDigest");
  std::optional<StringRef> WordsFile = Manifest.getString("words");
  std::optional<StringRef> WordsDigest = Manifest.getString("wordsDigest");
  if (!PCHFile || !PCHDigest || !WordsFile || !WordsDigest)
    return false;
  PCHPath = (Dir + "/" + *PCHFile).str();
  WordsPath = (Dir + "/" + *WordsFile).str();
  if (digestOfFile(PCHPath) != PCHDigest->str())
    return false;
  auto Words = MemoryBuffer::getFile(WordsPath);
  if (!Words || digestOf((*Words)->getBuffer()) != *WordsDigest)
    return false;
  auto F = std::make_unique<PreambleFacts>();
  bool OK = true;
  F->Headers = stringsOf(Manifest, "headers", OK);
  F->Lookups = stringsOf(Manifest, "lookups", OK);
  for (const std::string &Macro : stringsOf(Manifest, "macros", OK))
    F->Macros.insert(Macro);
  if (!OK || F->Headers.size() != Req.Includes.size())
    return false;
  SmallVector<StringRef, 0> Lines;
  (*Words)->getBuffer().split(Lines, '\n', -1, /*KeepEmpty=*/false);
  for (StringRef Word : Lines)
    F->Words.insert(Word);
  Bytes = Manifest.getInteger("pchBytes").value_or(0);
  BuildSeconds = Manifest.getNumber("buildSeconds").value_or(0);
  Shadows = std::make_unique<ShadowCheck>(F->Lookups);
  Facts = std::move(F);
  return true;
}

bool SharedPCH::writeManifest(bool Usable, ArrayRef<std::string> Files,
                              const PreambleFacts &F, StringRef WordsDigest) {
  json::Array Listed;
  for (const std::string &File : Files)
    if (std::optional<std::string> Digest = Digests.get(File))
      Listed.push_back(json::Object{{"file", File}, {"digest", *Digest}});
  json::Object Manifest{{"version", ManifestVersion},
                        {"usable", Usable},
                        {"reason", Reason},
                        {"prefix", json::Array(Req.Includes)},
                        {"inputs", std::move(Listed)}};
  if (Usable) {
    std::optional<std::string> Digest = digestOfFile(PCHPath);
    if (!Digest)
      return false;
    std::vector<std::string> Macros;
    for (const auto &M : F.Macros)
      Macros.push_back(M.getKey().str());
    llvm::sort(Macros);
    Manifest["pch"] = sys::path::filename(PCHPath);
    Manifest["pchDigest"] = *Digest;
    Manifest["pchBytes"] = int64_t(Bytes);
    Manifest["buildSeconds"] = BuildSeconds;
    Manifest["words"] = sys::path::filename(WordsPath);
    Manifest["wordsDigest"] = WordsDigest;
    Manifest["headers"] = json::Array(F.Headers);
    Manifest["lookups"] = json::Array(F.Lookups);
    Manifest["macros"] = json::Array(Macros);
  }
  // Written last and atomically: a manifest always describes a whole build.
  return writeText(ManifestPath,
                   formatv("{0:2}\n", json::Value(std::move(Manifest))).str());
}

bool SharedPCH::build() {
  auto Start = std::chrono::steady_clock::now();
  Inputs.clear();
  Reason.clear();
  Facts.reset();
  if (std::error_code EC = sys::fs::create_directories(Dir)) {
    Reason = "cannot create '" + Dir + "': " + EC.message();
    return false;
  }
  if (!writeText(PrefixPath, prefixHeaderText(Req.Includes))) {
    Reason = "cannot write '" + PrefixPath + "'";
    return false;
  }
  // Built under a name of its own, then renamed after its content: a
  // process that builds the same PCH at the same time does not disturb it.
  SmallString<256> Temp;
  if (std::error_code EC = sys::fs::createUniqueFile(
          Dir + "/building-%%%%%%%%.pch", Temp)) {
    Reason = "cannot write in '" + Dir + "': " + EC.message();
    return false;
  }

  std::vector<std::string> Args = Req.KeyArgs;
  Args.insert(Args.end(), {"-x", "c++-header", PrefixPath});
  IntrusiveRefCntPtr<vfs::FileSystem> FS = vfs::createPhysicalFileSystem();
  FS->setCurrentWorkingDirectory(Req.Directory);
  auto Files = makeIntrusiveRefCnt<FileManager>(FileSystemOptions(), FS);
  BuildOutcome Outcome;
  PrefixPCHFactory Factory(std::string(Temp), Outcome, Req.SkipBodies);
  FirstProblem Problems;
  tooling::ToolInvocation Invocation(
      Args, &Factory, Files.get(), std::make_shared<PCHContainerOperations>());
  Invocation.setDiagnosticConsumer(&Problems);
  bool Built = Invocation.run() && Problems.getNumErrors() == 0;

  if (!Built)
    Reason = "building it failed" +
             (Problems.First.empty() ? std::string() : ": " + Problems.First);
  else if (Problems.getNumWarnings())
    Reason = "building it gave a warning that each translation unit must "
             "report itself: " +
             Problems.First;
  else if (!Outcome.Unguarded.empty())
    Reason = "'" + Outcome.Unguarded.front() +
             "' has no include guard, so a translation unit cannot include "
             "it after the PCH";
  else if (Outcome.Facts.Headers.size() != Req.Includes.size())
    Reason = "a header of the prefix was not found";
  bool Usable = Reason.empty();
  std::optional<std::string> Digest = Usable ? digestOfFile(Temp) : "";
  if (Usable && !Digest)
    Reason = "cannot read the precompiled header it wrote";
  Usable = Usable && Digest;
  PCHPath = Dir + "/" + (Usable ? *Digest : "unused") + ".pch";
  if (Usable && sys::fs::rename(Temp, PCHPath)) {
    Reason = "cannot rename the precompiled header it wrote";
    Usable = false;
  }
  sys::fs::remove(Temp);

  // A failed build leaves the manifest as it was (none, or stale), so the
  // next run tries again (the error may be a header that is not there
  // yet); the other verdicts hold until an input changes.
  if (!Built)
    return false;
  std::vector<std::string> Read;
  StringSet<> Words;
  for (const std::string &Name : Outcome.Dependencies->getDependencies()) {
    Read.push_back(dependencyPath(Name, Req.Directory));
    if (Usable)
      if (auto Text = MemoryBuffer::getFile(Read.back()))
        collectWords((*Text)->getBuffer(), Words);
  }
  std::vector<StringRef> Sorted;
  for (const auto &W : Words)
    Sorted.push_back(W.getKey());
  llvm::sort(Sorted);
  std::string WordsText = join(Sorted, "\n") + "\n";
  std::string WordsDigest = digestOf(WordsText);
  WordsPath = Dir + "/words-" + WordsDigest + ".txt";
  if (Usable && !writeText(WordsPath, WordsText)) {
    Reason = "cannot write '" + WordsPath + "'";
    Usable = false;
  }
  Bytes = 0;
  sys::fs::file_status Status;
  if (Usable && !sys::fs::status(PCHPath, Status))
    Bytes = Status.getSize();
  BuildSeconds = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - Start)
                     .count();
  if (!writeManifest(Usable, Read, Outcome.Facts, WordsDigest)) {
    Reason = "cannot write '" + ManifestPath + "'";
    return false;
  }
  if (!Usable) {
    removeOldBuilds(Dir, "", "");
    return false;
  }
  removeOldBuilds(Dir, PCHPath, WordsPath);
  Inputs = std::move(Read);
  Shadows = std::make_unique<ShadowCheck>(Outcome.Facts.Lookups);
  Facts = std::make_unique<PreambleFacts>(std::move(Outcome.Facts));
  Facts->Words = std::move(Words);
  return true;
}

} // namespace torchtidy
