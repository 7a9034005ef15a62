//===--- SharedPch.cpp - torch-tidy driver --------------------------------===//

#include "SharedPch.h"

#include "Finding.h"
#include "clang/Basic/Version.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/FrontendActions.h"
#include "clang/Frontend/Utils.h"
#include "clang/Lex/HeaderSearch.h"
#include "clang/Lex/PPCallbacks.h"
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
#include <map>

using namespace llvm;
using namespace clang;

namespace torchtidy {

//===----------------------------------------------------------------------===//
// Finding the prefixes
//===----------------------------------------------------------------------===//

namespace {

/// Reads the preprocessor directives that open a file, one per line, and
/// stops at anything else (code, a line continuation, an unterminated
/// comment). Comments and blank lines between directives are skipped.
class DirectiveScanner {
public:
  explicit DirectiveScanner(StringRef Text) : Text(Text) {
    this->Text.consume_front("\xEF\xBB\xBF"); // UTF-8 byte order mark
  }

  /// The next directive without its '#' and trailing `//` comment
  /// ("include <x>", "pragma once"), or std::nullopt.
  std::optional<StringRef> next() {
    while (true) {
      Text = Text.ltrim();
      if (Text.consume_front("//")) {
        StringRef Line = Text.take_until([](char C) { return C == '\n'; });
        if (Line.rtrim("\r").ends_with("\\"))
          return std::nullopt; // a comment continued on the next line
        Text = Text.drop_front(Line.size());
        continue;
      }
      if (Text.consume_front("/*")) {
        size_t End = Text.find("*/");
        if (End == StringRef::npos)
          return std::nullopt;
        Text = Text.drop_front(End + 2);
        continue;
      }
      if (!Text.consume_front("#"))
        return std::nullopt;
      StringRef Line = Text.take_until([](char C) { return C == '\n'; });
      Text = Text.drop_front(Line.size());
      Line = Line.rtrim("\r").rtrim(" \t");
      if (Line.ends_with("\\"))
        return std::nullopt;
      size_t Comment = Line.find("//");
      // `//` inside a quoted header name is part of the name.
      if (Comment != StringRef::npos &&
          Line.take_front(Comment).count('"') != 1)
        Line = Line.take_front(Comment).rtrim(" \t");
      if (Line.contains("/*"))
        return std::nullopt; // leave block comments in directives to clang
      return Line.ltrim(" \t");
    }
  }

private:
  StringRef Text;
};

/// `<x>` or `"x"` from an include directive, or "" for anything else (a
/// macro naming the header, #include_next, junk after the name).
StringRef includedName(StringRef Directive) {
  if (!Directive.consume_front("include") || Directive.empty() ||
      (Directive.front() != ' ' && Directive.front() != '\t' &&
       Directive.front() != '<' && Directive.front() != '"'))
    return "";
  Directive = Directive.ltrim(" \t");
  char Close = Directive.starts_with("<")    ? '>'
               : Directive.starts_with("\"") ? '"'
                                             : 0;
  size_t End = Close ? Directive.find(Close, 1) : StringRef::npos;
  if (End == StringRef::npos || End == 1 || End + 1 != Directive.size())
    return "";
  return Directive;
}

std::vector<std::string> includesFrom(DirectiveScanner &Scanner) {
  std::vector<std::string> Includes;
  while (std::optional<StringRef> Directive = Scanner.next()) {
    StringRef Name = includedName(*Directive);
    if (Name.empty())
      break;
    Includes.push_back(Name.str());
  }
  return Includes;
}

/// The includes that open a header right after its include guard
/// (`#pragma once`, or `#ifndef X` and `#define X`); none when it opens
/// with anything else.
std::vector<std::string> includesAfterGuard(StringRef Text) {
  DirectiveScanner Scanner(Text);
  std::optional<StringRef> First = Scanner.next();
  if (!First)
    return {};
  if (*First != "pragma once") {
    StringRef Macro = *First;
    if (!Macro.consume_front("ifndef"))
      return {};
    Macro = Macro.trim();
    std::optional<StringRef> Define = Scanner.next();
    if (Macro.empty() || !Define || !Define->consume_front("define") ||
        Define->trim() != Macro)
      return {};
  }
  return includesFrom(Scanner);
}

} // namespace

std::vector<std::string> leadingIncludes(StringRef Text) {
  DirectiveScanner Scanner(Text);
  return includesFrom(Scanner);
}

std::vector<std::string> resolveIncludes(ArrayRef<std::string> Includes,
                                         StringRef File, bool LookThrough) {
  std::vector<std::string> Resolved;
  StringRef Dir = sys::path::parent_path(File);
  for (const std::string &Include : Includes) {
    if (StringRef(Include).starts_with("<")) {
      Resolved.push_back(Include);
      continue;
    }
    // A quoted include is looked up next to the including file first; the
    // PCH is elsewhere, so it names that file by its absolute path.
    std::string Next =
        normalizePath(StringRef(Include).drop_front().drop_back(), Dir);
    if (!sys::fs::is_regular_file(Next))
      break;
    // A project header that opens the TU and itself opens with includes
    // (say, <torch/torch.h>): the PCH can hold those instead, to be shared
    // with every TU that opens with them, whatever its project header.
    if (LookThrough && Resolved.empty())
      if (auto Header = MemoryBuffer::getFile(Next)) {
        std::vector<std::string> Inner =
            includesAfterGuard((*Header)->getBuffer());
        if (!Inner.empty())
          return resolveIncludes(Inner, Next, /*LookThrough=*/false);
      }
    Resolved.push_back("\"" + Next + "\"");
  }
  return Resolved;
}

std::vector<PrefixGroup>
planPrefixGroups(ArrayRef<PrefixCandidate> Candidates) {
  std::map<std::string, std::vector<size_t>> ByFlags;
  for (size_t I = 0; I < Candidates.size(); ++I)
    if (!Candidates[I].FlagsKey.empty() && !Candidates[I].Includes.empty())
      ByFlags[Candidates[I].FlagsKey].push_back(I);

  std::vector<PrefixGroup> Groups;
  for (auto &[Key, Rest] : ByFlags) {
    while (Rest.size() >= 2) {
      std::map<std::string, unsigned> Count;
      for (size_t I : Rest)
        ++Count[Candidates[I].Includes.front()];
      auto Best = Count.begin();
      for (auto It = Count.begin(); It != Count.end(); ++It)
        if (It->second > Best->second)
          Best = It;
      if (Best->second < 2)
        break;
      PrefixGroup G;
      G.FlagsKey = Key;
      std::vector<size_t> Others;
      for (size_t I : Rest)
        (Candidates[I].Includes.front() == Best->first ? G.Members : Others)
            .push_back(I);
      G.Includes = Candidates[G.Members.front()].Includes;
      for (size_t I : G.Members) {
        const std::vector<std::string> &Own = Candidates[I].Includes;
        size_t Common = 0;
        while (Common < G.Includes.size() && Common < Own.size() &&
               G.Includes[Common] == Own[Common])
          ++Common;
        G.Includes.resize(Common);
      }
      Groups.push_back(std::move(G));
      Rest = std::move(Others);
    }
  }
  return Groups;
}

std::string prefixHeaderText(ArrayRef<std::string> Includes) {
  std::string Text = "// torch-tidy --audit: the shared prefix of several "
                     "translation units.\n";
  for (const std::string &Include : Includes)
    Text += "#include " + Include + "\n";
  return Text;
}

std::string describePrefix(ArrayRef<std::string> Includes) {
  return join(Includes, ", ");
}

//===----------------------------------------------------------------------===//
// Building the PCH
//===----------------------------------------------------------------------===//

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

/// Records the files that the prefix header includes directly.
class DirectIncludes : public PPCallbacks {
public:
  DirectIncludes(const SourceManager &SM, std::vector<FileEntryRef> &Out)
      : SM(SM), Out(Out) {}
  void InclusionDirective(SourceLocation HashLoc, const Token &, StringRef,
                          bool, CharSourceRange, OptionalFileEntryRef File,
                          StringRef, StringRef, const Module *, bool,
                          SrcMgr::CharacteristicKind) override {
    if (File && SM.isInMainFile(HashLoc))
      Out.push_back(*File);
  }

private:
  const SourceManager &SM;
  std::vector<FileEntryRef> &Out;
};

struct BuildOutcome {
  std::shared_ptr<AllDependencies> Dependencies =
      std::make_shared<AllDependencies>();
  std::vector<std::string> Unguarded;
};

class PrefixPCHAction : public GeneratePCHAction {
public:
  explicit PrefixPCHAction(BuildOutcome &Outcome) : Outcome(Outcome) {}

  bool BeginInvocation(CompilerInstance &CI) override {
    CI.addDependencyCollector(Outcome.Dependencies);
    return GeneratePCHAction::BeginInvocation(CI);
  }
  bool BeginSourceFileAction(CompilerInstance &CI) override {
    if (!GeneratePCHAction::BeginSourceFileAction(CI))
      return false;
    CI.getPreprocessor().addPPCallbacks(
        std::make_unique<DirectIncludes>(CI.getSourceManager(), Direct));
    return true;
  }
  void EndSourceFileAction() override {
    // A TU includes the prefix headers again after the PCH: that is a no-op
    // only for headers with an include guard or #pragma once.
    const HeaderSearch &HS =
        getCompilerInstance().getPreprocessor().getHeaderSearchInfo();
    for (FileEntryRef File : Direct)
      if (!HS.isFileMultipleIncludeGuarded(File))
        Outcome.Unguarded.push_back(File.getName().str());
    GeneratePCHAction::EndSourceFileAction();
  }

private:
  BuildOutcome &Outcome;
  std::vector<FileEntryRef> Direct;
};

class PrefixPCHFactory : public tooling::FrontendActionFactory {
public:
  PrefixPCHFactory(std::string Output, BuildOutcome &Outcome)
      : Output(std::move(Output)), Outcome(Outcome) {}

  std::unique_ptr<FrontendAction> create() override {
    return std::make_unique<PrefixPCHAction>(Outcome);
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
    // The templates that the headers use are instantiated once, in the PCH,
    // rather than at the end of every TU (as clang-cl's /Yc does): half of a
    // LibTorch TU's parse. A TU whose meaning that would change (a main-file
    // declaration found at the point of instantiation) is ill-formed, no
    // diagnostic required; if clang reports it, the TU is parsed in full.
    Invocation->getLangOpts().PCHInstantiateTemplates = true;
    return FrontendActionFactory::runInvocation(
        std::move(Invocation), Files, std::move(PCHContainerOps), DiagConsumer);
  }

private:
  std::string Output;
  BuildOutcome &Outcome;
};

std::optional<std::string> digestOfFile(StringRef Path) {
  auto Buffer = MemoryBuffer::getFile(Path, /*IsText=*/false,
                                      /*RequiresNullTerminator=*/false);
  if (!Buffer)
    return std::nullopt;
  return digestOf((*Buffer)->getBuffer());
}

constexpr int ManifestVersion = 1;

} // namespace

SharedPCH::SharedPCH(Request R, FileDigests &Digests)
    : Req(std::move(R)), Digests(Digests) {
  json::Array Key{Req.ToolId, getClangFullVersion(), Req.Directory};
  for (const std::string &Arg : Req.FlagArgs)
    Key.push_back(Arg);
  Key.push_back("--");
  for (const std::string &Include : Req.Includes)
    Key.push_back(Include);
  SmallString<256> Path(Req.CacheDir);
  sys::path::append(
      Path, "pch", digestOf(formatv("{0}", json::Value(std::move(Key))).str()));
  Dir = std::string(Path);
  PCHPath = (Dir + "/prefix.pch");
  PrefixPath = (Dir + "/prefix.h");
  ManifestPath = (Dir + "/manifest.json");
}

SharedPCH::State SharedPCH::check() {
  Inputs.clear();
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
  std::optional<StringRef> Expected = Manifest->getString("pch");
  if (!Expected || digestOfFile(PCHPath) != Expected->str()) {
    Reason = "the precompiled header file is missing or damaged";
    return State::Stale;
  }
  Inputs = std::move(Listed);
  return State::Ready;
}

bool SharedPCH::writeManifest(bool Usable, ArrayRef<std::string> Files) {
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
    Manifest["pch"] = *Digest;
  }
  // Written last and atomically: a manifest always describes a whole PCH.
  Error E = writeToOutput(ManifestPath, [&](raw_ostream &OS) {
    OS << formatv("{0:2}", json::Value(std::move(Manifest))) << '\n';
    return Error::success();
  });
  if (E) {
    consumeError(std::move(E));
    return false;
  }
  return true;
}

bool SharedPCH::build() {
  Inputs.clear();
  Reason.clear();
  sys::fs::remove(ManifestPath);
  if (std::error_code EC = sys::fs::create_directories(Dir)) {
    Reason = "cannot create '" + Dir + "': " + EC.message();
    return false;
  }
  std::string Text = prefixHeaderText(Req.Includes);
  if (Error E = writeToOutput(PrefixPath, [&](raw_ostream &OS) {
        OS << Text;
        return Error::success();
      })) {
    Reason = "cannot write '" + PrefixPath + "': " + toString(std::move(E));
    return false;
  }

  std::vector<std::string> Args = Req.FlagArgs;
  Args.insert(Args.end(), {"-x", "c++-header", PrefixPath});
  IntrusiveRefCntPtr<vfs::FileSystem> FS = vfs::createPhysicalFileSystem();
  FS->setCurrentWorkingDirectory(Req.Directory);
  auto Files = makeIntrusiveRefCnt<FileManager>(FileSystemOptions(), FS);
  BuildOutcome Outcome;
  PrefixPCHFactory Factory(PCHPath, Outcome);
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
  bool Usable = Reason.empty();
  if (!Usable)
    sys::fs::remove(PCHPath);

  // A failed build leaves no manifest, so the next run tries again (the
  // error may be a header that is not there yet); the other verdicts hold
  // until an input changes.
  if (!Built)
    return false;
  std::vector<std::string> Read;
  for (const std::string &Name : Outcome.Dependencies->getDependencies())
    Read.push_back(dependencyPath(Name, Req.Directory));
  if (!writeManifest(Usable, Read) && Usable) {
    Reason = "cannot write '" + ManifestPath + "'";
    sys::fs::remove(PCHPath);
    return false;
  }
  if (Usable)
    Inputs = std::move(Read);
  return Usable;
}

} // namespace torchtidy
