//===--- Runner.cpp - torch-tidy driver -----------------------------------===//
//
// The per-TU work mirrors clang::tidy::runClangTidy (same ASTConsumer factory,
// same diagnostic consumer, so NOLINT, header filters and warnings-as-errors
// behave exactly as in clang-tidy), with three differences that a
// multi-threaded driver needs:
//  - each TU gets its own physical file system whose working directory is not
//    the process's (ClangTool changes the working directory of its file
//    system to the compile command's directory);
//  - ClangTool's "Error while processing" lines are turned off: failures are
//    reported through the diagnostics and TUResult;
//  - the run result tells whether the invocation failed;
//  - fatal errors are plain errors (libclang's CXTranslationUnit_KeepGoing):
//    after a missing header clang still reads the later #includes, so a
//    compile database that lacks one dependency's include path still gets
//    the torch findings.
//
//===----------------------------------------------------------------------===//

#include "Runner.h"

#include "FileDigest.h"
#include "Messages.h"
#include "SummaryExporter.h"
#include "SystemBodies.h"
#include "model/FlowAnalysis.h"
#include "clang-tidy/ClangTidy.h"
#include "clang-tidy/ClangTidyModule.h"
#include "clang-tidy/GlobList.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Frontend/FrontendActions.h"
#include "clang/Frontend/Utils.h"
#include "clang/Lex/DirectoryLookup.h"
#include "clang/Lex/HeaderSearch.h"
#include "clang/Lex/PreprocessorOptions.h"
#include "clang/Tooling/ArgumentsAdjusters.h"
#include "clang/Tooling/Tooling.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"
#include "llvm/Support/VirtualFileSystem.h"
#include "llvm/Support/thread.h"
#include <algorithm>
#include <set>

using namespace llvm;
using namespace clang;
using namespace clang::tooling;
using clang::tidy::ClangTidyASTConsumerFactory;
using clang::tidy::ClangTidyContext;
using clang::tidy::ClangTidyDiagnosticConsumer;
using clang::tidy::ClangTidyError;

namespace torchtidy {
namespace {

/// The commands resolved for one file, served as a compilation database.
class JobDatabase : public CompilationDatabase {
public:
  explicit JobDatabase(const TUJob &Job) : Job(Job) {}
  std::vector<CompileCommand>
  getCompileCommands(StringRef FilePath) const override {
    return FilePath == Job.File ? Job.Commands
                                : std::vector<CompileCommand>();
  }
  std::vector<std::string> getAllFiles() const override { return {Job.File}; }

private:
  const TUJob &Job;
};

/// Every source file a TU reads, system headers and a PCH's inputs
/// included (but not the PCH itself: a cache, not a source).
class AllDependencies : public DependencyCollector {
public:
  /// The spelled names of the headers that were not found, and the
  /// directories of the header search (EndSourceFileAction fills them).
  std::vector<std::string> Missing, SearchDirectories;

private:
  bool needSystemDependencies() override { return true; }
  bool sawDependency(StringRef Filename, bool FromModule, bool IsSystem,
                     bool IsModuleFile, bool IsMissing) override {
    if (IsMissing)
      Missing.push_back(Filename.str());
    return !IsModuleFile && !IsMissing &&
           DependencyCollector::sawDependency(Filename, FromModule, IsSystem,
                                              IsModuleFile, IsMissing);
  }
};

/// The places a missing header would be found at: each name under every
/// search directory and every directory of a file the TU read (a quoted
/// include starts at its includer's).
static std::vector<std::string>
absentIncludes(const AllDependencies &Deps,
               const std::vector<std::string> &Read, StringRef CommandDir) {
  std::set<std::string> Directories;
  for (const std::string &D : Deps.SearchDirectories)
    Directories.insert(dependencyPath(D, CommandDir));
  for (const std::string &File : Read)
    Directories.insert(sys::path::parent_path(File).str());
  std::set<std::string> Out;
  for (const std::string &Name : Deps.Missing) {
    if (sys::path::is_absolute(Name)) {
      Out.insert(Name);
      continue;
    }
    for (const std::string &D : Directories)
      Out.insert((D + "/" + Name));
  }
  return {Out.begin(), Out.end()};
}

class TidyActionFactory : public FrontendActionFactory {
public:
  TidyActionFactory(ClangTidyContext &Context, bool SkipBodies,
                    const TUExtras &Extras)
      : Context(Context), ConsumerFactory(Context), SkipBodies(SkipBodies),
        Extras(Extras) {
    if (Extras.CollectDependencies)
      Dependencies = std::make_shared<AllDependencies>();
  }

  std::unique_ptr<FrontendAction> create() override {
    if (Extras.Preamble && !Extras.PCHPath.empty())
      Guard = std::make_unique<PreambleGuard>(*Extras.Preamble);
    return std::make_unique<Action>(
        Context, ConsumerFactory, Dependencies,
        Extras.ExportSummaries ? &SummaryExport : nullptr, SkipBodies,
        Guard.get());
  }

  std::shared_ptr<AllDependencies> Dependencies;
  std::string SummaryExport;
  std::unique_ptr<PreambleGuard> Guard;

  bool runInvocation(std::shared_ptr<CompilerInvocation> Invocation,
                     FileManager *Files,
                     std::shared_ptr<PCHContainerOperations> PCHContainerOps,
                     DiagnosticConsumer *DiagConsumer) override {
    // As in clang-tidy: code under `#ifdef __clang_analyzer__` is seen.
    Invocation->getPreprocessorOpts().SetUpStaticAnalyzer = true;
    // No "N warnings generated." on stderr: the driver prints the findings.
    Invocation->getDiagnosticOpts().ShowCarets = false;
    if (SkipBodies)
      enableBodySkipping(*Invocation);
    if (!Extras.PCHPath.empty()) {
      Invocation->getPreprocessorOpts().ImplicitPCHInclude = Extras.PCHPath;
      // A header that was only touched since the PCH was built is fine.
      Invocation->getHeaderSearchOpts().ValidateASTInputFilesContent = true;
    }
    return FrontendActionFactory::runInvocation(std::move(Invocation), Files,
                                                std::move(PCHContainerOps),
                                                DiagConsumer);
  }

private:
  class Action : public ASTFrontendAction {
  public:
    Action(ClangTidyContext &Context, ClangTidyASTConsumerFactory &Factory,
           std::shared_ptr<AllDependencies> Dependencies,
           std::string *SummaryExport, bool SkipBodies, PreambleGuard *Guard)
        : Context(Context), Factory(Factory),
          Dependencies(std::move(Dependencies)),
          SummaryExport(SummaryExport), SkipBodies(SkipBodies), Guard(Guard) {}
    bool BeginInvocation(CompilerInstance &CI) override {
      CI.getDiagnostics().setFatalsAsError(true);
      if (Dependencies)
        CI.addDependencyCollector(Dependencies);
      return true;
    }
    bool BeginSourceFileAction(CompilerInstance &CI) override {
      if (Guard)
        Guard->attach(CI.getPreprocessor());
      return ASTFrontendAction::BeginSourceFileAction(CI);
    }
    void EndSourceFileAction() override {
      if (Dependencies && !Dependencies->Missing.empty() &&
          getCompilerInstance().hasPreprocessor())
        for (const DirectoryLookup &Lookup : getCompilerInstance()
                                                 .getPreprocessor()
                                                 .getHeaderSearchInfo()
                                                 .search_dir_range())
          if (OptionalDirectoryEntryRef Dir = Lookup.getDirRef())
            Dependencies->SearchDirectories.push_back(Dir->getName().str());
      ASTFrontendAction::EndSourceFileAction();
    }
    std::unique_ptr<ASTConsumer> CreateASTConsumer(CompilerInstance &CI,
                                                   StringRef File) override {
      std::unique_ptr<ASTConsumer> Tidy = Factory.createASTConsumer(CI, File);
      if (SummaryExport)
        Tidy = exportingConsumer(std::move(Tidy), *SummaryExport, Context);
      return SkipBodies ? skipSystemBodies(std::move(Tidy)) : std::move(Tidy);
    }

  private:
    ClangTidyContext &Context;
    ClangTidyASTConsumerFactory &Factory;
    std::shared_ptr<AllDependencies> Dependencies;
    std::string *SummaryExport;
    bool SkipBodies;
    PreambleGuard *Guard;
  };

  ClangTidyContext &Context;
  ClangTidyASTConsumerFactory ConsumerFactory;
  bool SkipBodies;
  const TUExtras &Extras;
};

/// clang-tidy's consumer, which also keeps the first compiler error as clang
/// emitted it (clang-tidy sorts its errors by file and offset).
class RecordingDiagnosticConsumer : public ClangTidyDiagnosticConsumer {
public:
  RecordingDiagnosticConsumer(ClangTidyContext &Context,
                              const DiagnosticsEngine &CheckDiagnostics)
      : ClangTidyDiagnosticConsumer(Context, nullptr,
                                    /*RemoveIncompatibleErrors=*/true,
                                    /*GetFixesFromNotes=*/false),
        CheckDiagnostics(CheckDiagnostics) {}

  void HandleDiagnostic(DiagnosticsEngine::Level Level,
                        const clang::Diagnostic &Info) override {
    if (Level >= DiagnosticsEngine::Error && FirstError.empty() &&
        Info.getDiags() != &CheckDiagnostics)
      FirstError = describe(Info);
    ClangTidyDiagnosticConsumer::HandleDiagnostic(Level, Info);
  }

  std::string FirstError;

private:
  static std::string describe(const clang::Diagnostic &Info) {
    SmallString<128> Text;
    Info.FormatDiagnostic(Text);
    if (!Info.hasSourceManager() || Info.getLocation().isInvalid())
      return std::string(Text);
    const SourceManager &SM = Info.getSourceManager();
    PresumedLoc Where = SM.getPresumedLoc(SM.getFileLoc(Info.getLocation()));
    if (Where.isInvalid())
      return std::string(Text);
    std::string File = Where.getFilename();
    if (OptionalFileEntryRef Entry = SM.getFileEntryRefForID(Where.getFileID()))
      if (StringRef Real = SM.getFileManager().getCanonicalName(*Entry);
          !Real.empty())
        File = Real.str();
    return (File + ":" + Twine(Where.getLine()) + ":" +
            Twine(Where.getColumn()) + ": " + Text)
        .str();
  }

  const DiagnosticsEngine &CheckDiagnostics;
};

/// clang's parser and the checks recurse once per nesting level of the code:
/// 10,000 nested statements need more than a thread's default 8 MiB of stack.
void runOnLargeStack(llvm::function_ref<void()> Work) {
  constexpr unsigned StackSize = 256u << 20; // reserved, touched on demand
  llvm::thread Worker(std::optional<unsigned>(StackSize), Work);
  Worker.join();
}

ArgumentsAdjuster resourceDirAdjuster(std::string ResourceDir) {
  return [ResourceDir](const CommandLineArguments &Args, StringRef) {
    if (ResourceDir.empty() || llvm::any_of(Args, [](const std::string &A) {
          return StringRef(A).starts_with("-resource-dir");
        }))
      return Args;
    CommandLineArguments Adjusted = Args;
    auto Pos = Adjusted.empty() ? Adjusted.end() : Adjusted.begin() + 1;
    Adjusted.insert(Pos, "-resource-dir=" + ResourceDir);
    return Adjusted;
  };
}

/// The driver's adjustments, after ClangTool's own; \p OptionsFor gives the
/// configuration of a file.
ArgumentsAdjuster driverAdjuster(
    std::function<clang::tidy::ClangTidyOptions(StringRef)> OptionsFor,
    const RunOptions &Options) {
  // ExtraArgs / ExtraArgsBefore from .clang-tidy, as clang-tidy does.
  ArgumentsAdjuster Adjuster = [OptionsFor](const CommandLineArguments &Args,
                                            StringRef Filename) {
    clang::tidy::ClangTidyOptions Opts = OptionsFor(Filename);
    CommandLineArguments Adjusted = Args;
    if (Opts.ExtraArgsBefore) {
      auto I = Adjusted.begin();
      if (I != Adjusted.end() && !StringRef(*I).starts_with("-"))
        ++I; // after the compiler's name
      Adjusted.insert(I, Opts.ExtraArgsBefore->begin(),
                      Opts.ExtraArgsBefore->end());
    }
    if (Opts.ExtraArgs)
      Adjusted.insert(Adjusted.end(), Opts.ExtraArgs->begin(),
                      Opts.ExtraArgs->end());
    return Adjusted;
  };
  if (!Options.ExtraArgsBefore.empty())
    Adjuster = combineAdjusters(
        Adjuster, getInsertArgumentAdjuster(Options.ExtraArgsBefore,
                                            ArgumentInsertPosition::BEGIN));
  if (!Options.ExtraArgs.empty())
    Adjuster = combineAdjusters(
        Adjuster, getInsertArgumentAdjuster(Options.ExtraArgs,
                                            ArgumentInsertPosition::END));
  Adjuster = combineAdjusters(Adjuster, getStripPluginsAdjuster());
  return combineAdjusters(Adjuster, resourceDirAdjuster(Options.ResourceDir));
}

namespace {
/// The configuration of a provider, with the facts of other TUs added as the
/// module-wide `torch.Summaries` option: the checks read them from there,
/// whichever way they run.
class WithSummaries : public clang::tidy::ClangTidyOptionsProvider {
public:
  WithSummaries(std::unique_ptr<clang::tidy::ClangTidyOptionsProvider> Inner,
                std::string Path)
      : Inner(std::move(Inner)), Path(std::move(Path)) {}
  const clang::tidy::ClangTidyGlobalOptions &getGlobalOptions() override {
    return Inner->getGlobalOptions();
  }
  std::vector<OptionsSource> getRawOptions(StringRef FileName) override {
    std::vector<OptionsSource> Sources = Inner->getRawOptions(FileName);
    clang::tidy::ClangTidyOptions Added;
    Added.CheckOptions["torch.Summaries"] =
        clang::tidy::ClangTidyOptions::ClangTidyValue(Path, 1000000);
    Sources.emplace_back(std::move(Added), "torch-tidy summaries");
    return Sources;
  }

private:
  std::unique_ptr<clang::tidy::ClangTidyOptionsProvider> Inner;
  std::string Path;
};
} // namespace

TUResult runOne(const TUJob &Job, const RunOptions &Options,
                const TUExtras &Extras) {
  TUResult Result;
  Result.File = Job.File;

  std::unique_ptr<clang::tidy::ClangTidyOptionsProvider> Provider =
      Options.MakeOptionsProvider();
  const std::string &Summaries = !Extras.SummariesPath.empty()
                                     ? Extras.SummariesPath
                                     : Options.SummariesPath;
  if (!Summaries.empty())
    Provider = std::make_unique<WithSummaries>(std::move(Provider), Summaries);
  Result.EnabledChecks = clang::tidy::getCheckNames(
      Provider->getOptions(Job.File), /*AllowEnablingAnalyzerAlphaCheckers=*/
      false);
  ClangTidyContext Context(std::move(Provider));

  JobDatabase Database(Job);
  auto FS = makeIntrusiveRefCnt<vfs::OverlayFileSystem>(
      vfs::createPhysicalFileSystem());
  ClangTool Tool(Database, {Job.File},
                 std::make_shared<PCHContainerOperations>(), FS);
  Tool.setPrintErrorMessage(false);
  Tool.appendArgumentsAdjuster(driverAdjuster(
      [&Context](StringRef File) { return Context.getOptionsForFile(File); },
      Options));

  DiagnosticsEngine DE(new DiagnosticIDs(), new DiagnosticOptions());
  RecordingDiagnosticConsumer DiagConsumer(Context, DE);
  DE.setClient(&DiagConsumer, /*ShouldOwnClient=*/false);
  Context.setDiagnosticsEngine(&DE);
  Tool.setDiagnosticConsumer(&DiagConsumer);

  TidyActionFactory Factory(
      Context,
      skipsSystemBodies(Options, Context.getOptionsForFile(Job.File)),
      Extras);
  clang::tidy::torch::FlowAnalysis::setCapReporter(
      [](StringRef Message) { printNote(Message); });
  int RunStatus = 1;
  runOnLargeStack([&] { RunStatus = Tool.run(&Factory); });
  Result.Errors = DiagConsumer.take();
  if (Factory.Guard)
    Result.PreambleProblem = Factory.Guard->problem();
  // Relative names are relative to the command's directory; with commands
  // in several directories it is unknown which (the list stays empty).
  if (Factory.Dependencies &&
      llvm::all_of(Job.Commands, [&](const CompileCommand &C) {
        return C.Directory == Job.Commands.front().Directory;
      }))
  {
    for (const std::string &Name : Factory.Dependencies->getDependencies())
      Result.Dependencies.push_back(
          dependencyPath(Name, Job.Commands.front().Directory));
    Result.AbsentIncludes =
        absentIncludes(*Factory.Dependencies, Result.Dependencies,
                       Job.Commands.front().Directory);
  }

  Result.SummaryExport = std::move(Factory.SummaryExport);
  SourceCache Sources;
  for (const ClangTidyError &E : Result.Errors) {
    Result.Findings.push_back(toFinding(E, Sources));
    if (Result.Findings.back().isCompilerError())
      Result.CompileError = true;
  }
  if (Result.CompileError)
    Result.FirstCompileError = DiagConsumer.FirstError;
  if (RunStatus != 0 && !Result.CompileError)
    Result.ToolError = "clang could not process '" + Job.File + "'";
  return Result;
}

} // namespace

/// Whether \p Checks reports any compiler warning (`clang-diagnostic-<flag>`).
static bool reportsCompilerWarnings(StringRef Checks) {
  static const std::vector<std::string> Flags = DiagnosticIDs::getDiagnosticFlags();
  clang::tidy::GlobList Globs(Checks);
  return llvm::any_of(Flags, [&](StringRef Flag) {
    return Flag.consume_front("-W") && !Flag.starts_with("no-") &&
           Globs.contains(("clang-diagnostic-" + Flag).str());
  });
}

bool skipsSystemBodies(const RunOptions &Options,
                       const clang::tidy::ClangTidyOptions &FileOptions) {
  return Options.SkipSystemBodies && !FileOptions.SystemHeaders.value_or(false) &&
         !reportsCompilerWarnings(FileOptions.Checks.value_or(""));
}

TUResult runTU(const TUJob &Job, const RunOptions &Options,
               const TUExtras &Extras) {
  return runOne(Job, Options, Extras);
}

std::vector<std::string> effectiveArguments(const TUJob &Job,
                                            const CompileCommand &Command,
                                            const RunOptions &Options) {
  std::shared_ptr<clang::tidy::ClangTidyOptionsProvider> Provider =
      Options.MakeOptionsProvider();
  ArgumentsAdjuster Adjuster =
      combineAdjusters(combineAdjusters(getClangStripOutputAdjuster(),
                                        getClangSyntaxOnlyAdjuster()),
                       getClangStripDependencyFileAdjuster());
  Adjuster = combineAdjusters(
      Adjuster, driverAdjuster(
                    [Provider](StringRef File) {
                      return clang::tidy::ClangTidyOptions::getDefaults().merge(
                          Provider->getOptions(File), 0);
                    },
                    Options));
  std::vector<std::string> Args =
      Adjuster(Command.CommandLine, Command.Filename);
  // What ClangTool adds last when the command names no resource directory.
  static int Anchor;
  if (llvm::none_of(Args, [](const std::string &A) {
        return StringRef(A).starts_with("-resource-dir");
      }))
    Args.insert(Args.empty() ? Args.end() : Args.begin() + 1,
                "-resource-dir=" + CompilerInvocation::GetResourcesPath(
                                       "clang_tool", &Anchor));
  return Args;
}

std::vector<TUResult> runAll(const std::vector<TUJob> &Jobs,
                             const RunOptions &Options) {
  std::vector<TUResult> Results(Jobs.size());
  if (Jobs.empty())
    return Results;
  unsigned Threads = Options.Jobs ? Options.Jobs
                                  : hardware_concurrency().compute_thread_count();
  Threads = std::max(1u, std::min<unsigned>(Threads, Jobs.size()));
  DefaultThreadPool Pool(hardware_concurrency(Threads));
  for (size_t I = 0; I < Jobs.size(); ++I)
    Pool.async([&, I] {
      if (Options.OnStart)
        Options.OnStart(Jobs[I]);
      Results[I] = runOne(Jobs[I], Options, {});
    });
  Pool.wait();
  return Results;
}

} // namespace torchtidy
