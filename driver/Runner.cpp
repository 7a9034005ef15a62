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
//  - the run result tells whether the invocation failed.
//
//===----------------------------------------------------------------------===//

#include "Runner.h"

#include "clang-tidy/ClangTidy.h"
#include "clang-tidy/ClangTidyModule.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Frontend/FrontendActions.h"
#include "clang/Lex/PreprocessorOptions.h"
#include "clang/Tooling/ArgumentsAdjusters.h"
#include "clang/Tooling/Tooling.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"
#include "llvm/Support/VirtualFileSystem.h"
#include <algorithm>

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

class TidyActionFactory : public FrontendActionFactory {
public:
  explicit TidyActionFactory(ClangTidyContext &Context)
      : ConsumerFactory(Context) {}

  std::unique_ptr<FrontendAction> create() override {
    return std::make_unique<Action>(ConsumerFactory);
  }

  bool runInvocation(std::shared_ptr<CompilerInvocation> Invocation,
                     FileManager *Files,
                     std::shared_ptr<PCHContainerOperations> PCHContainerOps,
                     DiagnosticConsumer *DiagConsumer) override {
    // As in clang-tidy: code under `#ifdef __clang_analyzer__` is seen.
    Invocation->getPreprocessorOpts().SetUpStaticAnalyzer = true;
    // No "N warnings generated." on stderr: the driver prints the findings.
    Invocation->getDiagnosticOpts().ShowCarets = false;
    return FrontendActionFactory::runInvocation(std::move(Invocation), Files,
                                                std::move(PCHContainerOps),
                                                DiagConsumer);
  }

private:
  class Action : public ASTFrontendAction {
  public:
    explicit Action(ClangTidyASTConsumerFactory &Factory) : Factory(Factory) {}
    std::unique_ptr<ASTConsumer> CreateASTConsumer(CompilerInstance &CI,
                                                   StringRef File) override {
      return Factory.createASTConsumer(CI, File);
    }

  private:
    ClangTidyASTConsumerFactory &Factory;
  };

  ClangTidyASTConsumerFactory ConsumerFactory;
};

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

TUResult runOne(const TUJob &Job, const RunOptions &Options) {
  TUResult Result;
  Result.File = Job.File;

  std::unique_ptr<clang::tidy::ClangTidyOptionsProvider> Provider =
      Options.MakeOptionsProvider();
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

  // ExtraArgs / ExtraArgsBefore from .clang-tidy, as clang-tidy does.
  Tool.appendArgumentsAdjuster([&Context](const CommandLineArguments &Args,
                                          StringRef Filename) {
    clang::tidy::ClangTidyOptions Opts = Context.getOptionsForFile(Filename);
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
  });
  if (!Options.ExtraArgsBefore.empty())
    Tool.appendArgumentsAdjuster(getInsertArgumentAdjuster(
        Options.ExtraArgsBefore, ArgumentInsertPosition::BEGIN));
  if (!Options.ExtraArgs.empty())
    Tool.appendArgumentsAdjuster(getInsertArgumentAdjuster(
        Options.ExtraArgs, ArgumentInsertPosition::END));
  Tool.appendArgumentsAdjuster(getStripPluginsAdjuster());
  Tool.appendArgumentsAdjuster(resourceDirAdjuster(Options.ResourceDir));

  ClangTidyDiagnosticConsumer DiagConsumer(Context, nullptr,
                                           /*RemoveIncompatibleErrors=*/true,
                                           /*GetFixesFromNotes=*/false);
  DiagnosticsEngine DE(new DiagnosticIDs(), new DiagnosticOptions(),
                       &DiagConsumer, /*ShouldOwnClient=*/false);
  Context.setDiagnosticsEngine(&DE);
  Tool.setDiagnosticConsumer(&DiagConsumer);

  TidyActionFactory Factory(Context);
  int RunStatus = Tool.run(&Factory);
  Result.Errors = DiagConsumer.take();

  SourceCache Sources;
  for (const ClangTidyError &E : Result.Errors) {
    Result.Findings.push_back(toFinding(E, Sources));
    if (Result.Findings.back().isCompilerError())
      Result.CompileError = true;
  }
  if (RunStatus != 0 && !Result.CompileError)
    Result.ToolError = "clang could not process '" + Job.File + "'";
  return Result;
}

} // namespace

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
    Pool.async([&, I] { Results[I] = runOne(Jobs[I], Options); });
  Pool.wait();
  return Results;
}

} // namespace torchtidy
