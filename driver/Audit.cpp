//===--- Audit.cpp - torch-tidy driver ------------------------------------===//

#include "Audit.h"

#include "CrossTU.h"
#include "analysis/ProgramModel.h"

#include "FileDigest.h"
#include "MemoryBudget.h"
#include "Messages.h"
#include "ResultCache.h"
#include "SharedPch.h"
#include "Terminal.h"
#include "clang-tidy/ClangTidyOptions.h"
#include "clang/Basic/Version.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"
#include <atomic>
#include <chrono>
#include <set>

using namespace llvm;

namespace torchtidy {
namespace {

constexpr uint64_t MiB = uint64_t(1) << 20;
// Peak memory of one parse (docs/driver.md, "Scheduling and memory"),
// measured on examples/: the PCH of <torch/torch.h> is 121 MB; building it
// peaks at 0.87 GB, a full parse of a TU at 0.70 GB, a parse that loads the
// PCH at 0.40 GB. Rounded up: 8x and 4x the PCH's size; with no PCH to go
// by, a LibTorch TU.
constexpr uint64_t UnknownParseBytes = 1024 * MiB;
constexpr uint64_t FullParseBytesPerPCHByte = 8;
constexpr uint64_t PCHParseBytesPerPCHByte = 4;
constexpr uint64_t MinParseBytes = 64 * MiB;
/// The share of the available memory that the parses may take.
constexpr double BudgetShare = 0.8;

bool isCxxSource(StringRef File) {
  StringRef Ext = sys::path::extension(File);
  return is_contained({".cpp", ".cc", ".cxx", ".c++", ".cp", ".C", ".CPP"},
                      Ext);
}

/// Flags that put something before the main file or change how headers are
/// read: a shared PCH would change their meaning.
bool blocksPCH(ArrayRef<std::string> Args) {
  for (StringRef Arg : Args)
    if (Arg.starts_with("-include") || Arg.starts_with("-imacros") ||
        Arg.starts_with("-fmodules") || Arg.starts_with("-x") ||
        Arg.starts_with("--driver-mode=cl") || Arg.starts_with("/FI") ||
        Arg.starts_with("/Yu"))
      return true;
  return false;
}

enum class PCHStatus { Unused, Building, Ready, Failed };

struct Group {
  std::unique_ptr<SharedPCH> PCH;
  std::atomic<PCHStatus> Status{PCHStatus::Unused};
  unsigned Misses = 0;
  std::atomic<uint64_t> PCHBytes{0}; // the PCH's size, once known
};

struct TUPlan {
  std::string CacheKey;              // "" when the result cache is off
  std::string FlagsKey;              // "" when the TU cannot use a PCH
  std::vector<std::string> FlagArgs; // arguments without the source file
  std::string Directory;
  uint64_t Size = 0;       // of the main file
  Group *Shared = nullptr; // its PCH group, if any
  bool Hit = false;
};

/// `[i/N] ETA 1m05s file` on a terminal; nothing elsewhere.
class ETAProgress {
public:
  ETAProgress(size_t Total, bool Enabled)
      : Line(Total, Enabled), Total(Total),
        Start(std::chrono::steady_clock::now()) {}
  void start(StringRef File) {
    size_t DoneNow = Done;
    std::string Status;
    if (DoneNow > 0 && DoneNow < Total) {
      double Elapsed = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - Start)
                           .count();
      unsigned Left = unsigned(Elapsed / DoneNow * (Total - DoneNow));
      Status = "ETA ";
      if (Left >= 60)
        Status += std::to_string(Left / 60) + (Left % 60 < 10 ? "m0" : "m");
      Status += std::to_string(Left % 60) + "s";
    }
    Line.start(File, Status);
  }
  void finished() { ++Done; }
  void finish() { Line.finish(); }

private:
  ProgressLine Line;
  size_t Total;
  std::atomic<size_t> Done{0};
  std::chrono::steady_clock::time_point Start;
};

class Auditor {
public:
  Auditor(const std::vector<TUJob> &Jobs, const RunOptions &Options,
          const AuditOptions &Audit)
      : Jobs(Jobs), Options(Options), Audit(Audit),
        Cache(Audit.CacheDir, Digests), Budget(budgetBytes(Audit)),
        Plans(Jobs.size()), Results(Jobs.size()) {}

  std::vector<TUResult> run() {
    plan();
    if (Audit.UseResultCache)
      lookup();
    if (Audit.UsePCH)
      planPCHs();
    analyse();
    if (Audit.CrossTU)
      crossTranslationUnit();
    summarise();
    return std::move(Results);
  }

private:
  static uint64_t budgetBytes(const AuditOptions &Audit) {
    if (Audit.MemoryBudget)
      return Audit.MemoryBudget;
    std::optional<uint64_t> Available = availableMemory();
    return Available ? uint64_t(*Available * BudgetShare) : UnknownParseBytes;
  }

  /// Cache keys, flag keys and sizes.
  void plan() {
    std::unique_ptr<clang::tidy::ClangTidyOptionsProvider> Provider =
        Options.MakeOptionsProvider();
    for (size_t I = 0; I < Jobs.size(); ++I) {
      const TUJob &Job = Jobs[I];
      TUPlan &P = Plans[I];
      sys::fs::file_status Status;
      if (!sys::fs::status(Job.File, Status))
        P.Size = Status.getSize();
      json::Array Commands;
      for (const clang::tooling::CompileCommand &Command : Job.Commands) {
        std::vector<std::string> Args =
            effectiveArguments(Job, Command, Options);
        Commands.push_back(json::Array{Command.Directory, json::Array(Args)});
        if (Job.Commands.size() != 1 || !isCxxSource(Job.File) ||
            blocksPCH(Args))
          continue;
        for (const std::string &Arg : Args)
          if (normalizePath(Arg, Command.Directory) != Job.File)
            P.FlagArgs.push_back(Arg);
        P.Directory = Command.Directory;
        P.FlagsKey = digestOf(formatv("{0}", json::Value(json::Array{
                                                 Command.Directory,
                                                 sys::path::extension(Job.File),
                                                 json::Array(P.FlagArgs)}))
                                  .str());
      }
      if (Audit.UseResultCache) {
        std::string Config = clang::tidy::configurationAsText(
            clang::tidy::ClangTidyOptions::getDefaults().merge(
                Provider->getOptions(Job.File), 0));
        P.CacheKey = ResultCache::key(
            Audit.ToolId, Job.File,
            formatv("{0}", json::Value(std::move(Commands))).str(), Config);
      }
    }
  }

  void lookup() {
    for (size_t I = 0; I < Jobs.size(); ++I) {
      std::optional<TUResult> Hit = Cache.lookup(Plans[I].CacheKey);
      if (!Hit)
        continue;
      Hit->File = Jobs[I].File;
      Results[I] = std::move(*Hit);
      Plans[I].Hit = true;
      ++Reused;
    }
  }

  /// Groups all TUs (so that the prefixes do not depend on what changed)
  /// and checks the PCHs of the groups that have TUs to analyse.
  void planPCHs() {
    std::vector<PrefixCandidate> Candidates(Jobs.size());
    for (size_t I = 0; I < Jobs.size(); ++I) {
      if (Plans[I].FlagsKey.empty())
        continue;
      auto Text = MemoryBuffer::getFile(Jobs[I].File);
      if (!Text)
        continue;
      Candidates[I].FlagsKey = Plans[I].FlagsKey;
      Candidates[I].Includes =
          resolveIncludes(leadingIncludes((*Text)->getBuffer()), Jobs[I].File);
    }
    for (PrefixGroup &PG : planPrefixGroups(Candidates)) {
      auto G = std::make_unique<Group>();
      for (size_t I : PG.Members)
        G->Misses += !Plans[I].Hit;
      if (G->Misses == 0)
        continue;
      const TUPlan &First = Plans[PG.Members.front()];
      G->PCH = std::make_unique<SharedPCH>(
          SharedPCH::Request{Audit.CacheDir, Audit.ToolId, First.Directory,
                             First.FlagArgs, PG.Includes},
          Digests);
      std::string Prefix = describePrefix(PG.Includes);
      switch (G->PCH->check()) {
      case SharedPCH::State::Ready:
        G->Status = PCHStatus::Ready;
        G->PCHBytes = fileSize(G->PCH->path());
        break;
      case SharedPCH::State::Unusable:
        noteOnce(formatv("not using a precompiled header for {0}: {1}; its "
                         "translation units are parsed in full",
                         Prefix, G->PCH->reason()));
        G->Status = PCHStatus::Failed;
        break;
      case SharedPCH::State::Stale:
        if (G->Misses >= 2)
          noteOnce(formatv("the precompiled header of {0} is stale ({1}); "
                           "rebuilding it",
                           Prefix, G->PCH->reason()));
        [[fallthrough]];
      case SharedPCH::State::Missing:
        // One TU alone parses faster in full than with a PCH to build.
        G->Status = G->Misses >= 2 ? PCHStatus::Building : PCHStatus::Failed;
        break;
      }
      for (size_t I : PG.Members)
        Plans[I].Shared = G.get();
      Groups.push_back(std::move(G));
    }
  }

  static uint64_t fileSize(StringRef Path) {
    sys::fs::file_status Status;
    return sys::fs::status(Path, Status) ? 0 : Status.getSize();
  }

  uint64_t estimate(const Group *G, bool WithPCH) const {
    if (!G || !G->PCHBytes)
      return UnknownParseBytes;
    return std::max(MinParseBytes,
                    G->PCHBytes * (WithPCH ? PCHParseBytesPerPCHByte
                                           : FullParseBytesPerPCHByte));
  }

  void analyse() {
    std::vector<size_t> Order;
    for (size_t I = 0; I < Jobs.size(); ++I)
      if (!Plans[I].Hit)
        Order.push_back(I);
    // Largest first: the long TUs do not end up alone at the end.
    llvm::stable_sort(Order, [&](size_t A, size_t B) {
      return Plans[A].Size != Plans[B].Size ? Plans[A].Size > Plans[B].Size
                                            : Jobs[A].File < Jobs[B].File;
    });
    // The PCH builds go first; a TU whose PCH is still being built when a
    // thread takes it is parsed in full rather than waited for.
    std::vector<std::function<void()>> Work;
    for (auto &G : Groups)
      if (G->Status == PCHStatus::Building)
        Work.push_back([this, G = G.get()] { buildPCH(*G); });
    for (size_t I : Order)
      Work.push_back([this, I] { analyseOne(I); });
    if (Order.empty())
      return;

    Progress = std::make_unique<ETAProgress>(Order.size(), Audit.Progress);
    runInParallel(Work);
    Progress->finish();
  }

  /// Runs \p Work on up to -j threads, in order of the list.
  void runInParallel(const std::vector<std::function<void()>> &Work) {
    unsigned Threads = Options.Jobs
                           ? Options.Jobs
                           : hardware_concurrency().compute_thread_count();
    Threads = std::max(1u, std::min<unsigned>(Threads, Work.size()));
    std::atomic<size_t> Next{0};
    DefaultThreadPool Pool(hardware_concurrency(Threads));
    for (unsigned T = 0; T < Threads; ++T)
      Pool.async([&] {
        for (size_t W; (W = Next++) < Work.size();)
          Work[W]();
      });
    Pool.wait();
  }

  /// The second phase (CrossTU.h): the TUs that read facts of other TUs
  /// are analysed again with the program's summaries.
  void crossTranslationUnit() {
    CrossTUPlan Plan = planCrossTU(Results);
    if (!Audit.CacheDir.empty() &&
        !writeSummaries(*Plan.Summaries, Audit.CacheDir + "/summaries.json"))
      noteOnce("could not write the program's summaries to " +
               Audit.CacheDir + "/summaries.json");
    if (Plan.Rerun.empty())
      return;
    clang::tidy::torch::ProgramModel::setExternalSummaries(Plan.Summaries);
    std::vector<std::function<void()>> Work;
    for (size_t K = 0; K < Plan.Rerun.size(); ++K) {
      size_t I = Plan.Rerun[K];
      std::string Key;
      if (!Plans[I].CacheKey.empty())
        Key = Plans[I].CacheKey + "-x" + Plan.ReadDigests[K].substr(0, 32);
      if (!Key.empty())
        if (std::optional<TUResult> Hit = Cache.lookup(Key)) {
          Hit->File = Jobs[I].File;
          Hit->SummaryExport = std::move(Results[I].SummaryExport);
          Results[I] = std::move(*Hit);
          ++CrossReused;
          continue;
        }
      Work.push_back([this, I, Key] { reanalyse(I, Key); });
    }
    runInParallel(Work);
    clang::tidy::torch::ProgramModel::setExternalSummaries(nullptr);
  }

  void reanalyse(size_t I, const std::string &Key) {
    Group *G = Plans[I].Shared;
    bool WithPCH = G && G->Status == PCHStatus::Ready;
    TUExtras Extras;
    Extras.CollectDependencies = true;
    if (WithPCH)
      Extras.PCHPath = G->PCH->path();
    TUResult R;
    {
      MemoryReservation Reserve(Budget, estimate(G, WithPCH));
      R = runTU(Jobs[I], Options, Extras);
      if (WithPCH && R.CompileError) {
        Extras.PCHPath.clear();
        R = runTU(Jobs[I], Options, Extras);
      }
    }
    ++CrossAnalysed;
    llvm::erase_if(R.Dependencies, [&](const std::string &File) {
      return StringRef(File).starts_with(Audit.CacheDir);
    });
    R.SummaryExport = std::move(Results[I].SummaryExport);
    if (Audit.UseResultCache && !Key.empty())
      Cache.store(Key, R);
    Results[I] = std::move(R);
  }

  void buildPCH(Group &G) {
    bool Ready;
    {
      MemoryReservation Reserve(Budget, estimate(&G, /*WithPCH=*/false));
      Ready = G.PCH->build();
    }
    if (Ready) {
      G.PCHBytes = fileSize(G.PCH->path());
      ++Built;
    } else {
      noteOnce(formatv("not using a precompiled header for {0}: {1}; its "
                       "translation units are parsed in full",
                       describePrefix(G.PCH->request().Includes),
                       G.PCH->reason()));
    }
    G.Status = Ready ? PCHStatus::Ready : PCHStatus::Failed;
  }

  void analyseOne(size_t I) {
    const TUJob &Job = Jobs[I];
    Group *G = Plans[I].Shared;
    bool WithPCH = G && G->Status == PCHStatus::Ready;
    Progress->start(Job.File);
    TUExtras Extras;
    Extras.CollectDependencies = true;
    Extras.ExportSummaries = Audit.CrossTU;
    TUResult R;
    {
      MemoryReservation Reserve(Budget, estimate(G, WithPCH));
      // The PCH may have been built while this waited for memory; what was
      // reserved for a full parse covers a parse with the PCH.
      WithPCH = G && G->Status == PCHStatus::Ready;
      if (WithPCH)
        Extras.PCHPath = G->PCH->path();
      R = runTU(Job, Options, Extras);
      if (WithPCH && R.CompileError) {
        // The PCH may be the cause (say, a header changed during the run):
        // the full parse decides.
        Extras.PCHPath.clear();
        TUResult Full = runTU(Job, Options, Extras);
        if (!Full.CompileError) {
          std::lock_guard<std::mutex> Lock(Mutex);
          if (FallbackExample.empty())
            FallbackExample = firstError(R);
          ++FellBack;
        }
        WithPCH = false;
        R = std::move(Full);
      }
    }
    ++Analysed;
    UsedPCH += WithPCH;
    // Only the sources count: the PCH's own files are in the cache.
    llvm::erase_if(R.Dependencies, [&](const std::string &File) {
      return StringRef(File).starts_with(Audit.CacheDir);
    });
    if (Audit.UseResultCache)
      Cache.store(Plans[I].CacheKey, R);
    Results[I] = std::move(R);
    Progress->finished();
  }

  static std::string firstError(const TUResult &R) {
    for (const Finding &F : R.Findings)
      if (F.isCompilerError())
        return F.Message;
    return R.ToolError;
  }

  void noteOnce(const Twine &Message) {
    std::string Text = Message.str();
    std::lock_guard<std::mutex> Lock(Mutex);
    if (Noted.insert(Text).second)
      printNote(Text);
  }

  void summarise() {
    if (FellBack)
      printNote(formatv("the precompiled header could not be used for {0} "
                        "translation unit(s), which were parsed in full "
                        "(first: {1})",
                        unsigned(FellBack), FallbackExample));
    std::string Parallel;
    if (Analysed)
      Parallel = formatv("; at most {0} at once within a {1} MiB memory budget",
                         Budget.peakHolders(), Budget.total() / MiB)
                     .str();
    if (Audit.Stats)
      *Audit.Stats = {Reused, Analysed, UsedPCH, Built};
    printNote(formatv("audit: {0} translation unit(s): {1} from the result "
                      "cache, {2} analysed ({3} with a precompiled header, "
                      "{4} precompiled header(s) built){5}",
                      Jobs.size(), unsigned(Reused), unsigned(Analysed),
                      unsigned(UsedPCH), unsigned(Built), Parallel));
    if (CrossAnalysed || CrossReused)
      printNote(formatv("audit: across translation units, {0} translation "
                        "unit(s) analysed again with the program's summaries "
                        "({1} from the result cache)",
                        unsigned(CrossAnalysed + CrossReused),
                        unsigned(CrossReused)));
  }

  const std::vector<TUJob> &Jobs;
  const RunOptions &Options;
  const AuditOptions &Audit;
  FileDigests Digests;
  ResultCache Cache;
  MemoryBudget Budget;
  std::vector<TUPlan> Plans;
  std::vector<TUResult> Results;
  std::vector<std::unique_ptr<Group>> Groups;
  std::unique_ptr<ETAProgress> Progress;

  std::mutex Mutex;
  std::set<std::string> Noted;
  std::string FallbackExample;
  std::atomic<unsigned> Reused{0}, Analysed{0}, UsedPCH{0}, Built{0},
      FellBack{0}, CrossAnalysed{0}, CrossReused{0};
};

} // namespace

std::string toolIdentity(const char *Argv0) {
  static int Anchor;
  std::string Exe = sys::fs::getMainExecutable(Argv0, &Anchor);
  sys::fs::file_status Status;
  std::string Stamp = Exe;
  if (!sys::fs::status(Exe, Status))
    Stamp +=
        formatv(" {0} {1}", Status.getSize(),
                Status.getLastModificationTime().time_since_epoch().count())
            .str();
  return digestOf(Stamp + " " + TORCH_TIDY_VERSION + " " +
                  clang::getClangFullVersion());
}

std::vector<TUResult> runAudit(const std::vector<TUJob> &Jobs,
                               const RunOptions &Options,
                               const AuditOptions &Audit) {
  return Auditor(Jobs, Options, Audit).run();
}

} // namespace torchtidy
