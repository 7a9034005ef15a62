//===--- Audit.cpp - torch-tidy driver ------------------------------------===//

#include "Audit.h"

#include "CrossTU.h"
#include "model/ProgramModel.h"

#include "FileDigest.h"
#include "MemoryBudget.h"
#include "Messages.h"
#include "ResultCache.h"
#include "PreamblePlan.h"
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
/// How many times the cross-TU phase may analyse a TU again: one more than
/// the longest chain of calls across files that it follows to the end.
constexpr unsigned MaxCrossTURounds = 4;
// Peak memory of one parse (docs/driver.md, "Scheduling and memory"),
// measured on examples/ with the system bodies skipped: the PCH of
// <torch/torch.h> is 79 MB; building it peaks at 0.57 GB, a full parse of a
// TU at 0.42 GB, a parse that loads the PCH at 0.25 GB (0.87, 0.70 and 0.40
// GB with every body, and a 121 MB PCH). Rounded up: 8x and 4x the PCH's
// size; with no PCH to go by, a LibTorch TU.
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

struct TUPlan {
  std::string CacheKey; // "" when the result cache is off
  std::string Directory;
  std::optional<PreambleFlags> Flags; // when it can share a preamble
  uint64_t Size = 0;                  // of the main file
  bool SkipBodies = true;
  bool Hit = false;
  /// The PCH the first analysis loaded; the cross-TU phase loads it again.
  SharedPreambles::Use Preamble;
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
        Preambles({Audit.CacheDir, Audit.ToolId, Audit.MinSharers},
                  Digests, [this](const Twine &Text) { noteOnce(Text); }),
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
    if (Audit.Summary)
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
      clang::tidy::ClangTidyOptions FileOptions =
          clang::tidy::ClangTidyOptions::getDefaults().merge(
              Provider->getOptions(Job.File), 0);
      P.SkipBodies = skipsSystemBodies(Options, FileOptions);
      json::Array Commands;
      for (const clang::tooling::CompileCommand &Command : Job.Commands) {
        std::vector<std::string> Args =
            effectiveArguments(Job, Command, Options);
        Commands.push_back(json::Array{Command.Directory, json::Array(Args)});
        if (Job.Commands.size() != 1 || !isCxxSource(Job.File))
          continue;
        P.Directory = Command.Directory;
        P.Flags = splitPreambleFlags(Args, Command.Directory, Job.File);
      }
      // The mode of parsing is part of what decides the findings.
      Commands.push_back(P.SkipBodies ? "skip-system-bodies" : "all-bodies");
      if (Audit.UseResultCache) {
        std::string Config = clang::tidy::configurationAsText(FileOptions);
        P.CacheKey = ResultCache::key(
            Audit.ToolId, Job.File,
            formatv("{0}", json::Value(std::move(Commands))).str(), Config);
      }
    }
  }

  /// On -j threads: reading an entry (its ~1500 dependencies) is most of
  /// a warm audit.
  void lookup() {
    std::vector<std::function<void()>> Work;
    for (size_t I = 0; I < Jobs.size(); ++I)
      Work.push_back([this, I] {
        std::optional<TUResult> Hit = Cache.lookup(Plans[I].CacheKey);
        if (!Hit)
          return;
        Hit->File = Jobs[I].File;
        Results[I] = std::move(*Hit);
        Plans[I].Hit = true;
        ++Reused;
      });
    runInParallel(Work);
  }

  void planPCHs() {
    std::vector<PreambleInput> Inputs(Jobs.size());
    for (size_t I = 0; I < Jobs.size(); ++I)
      Inputs[I] = {Jobs[I].File, Plans[I].Directory, Plans[I].Flags,
                   Plans[I].SkipBodies, !Plans[I].Hit};
    Preambles.plan(std::move(Inputs));
  }

  static uint64_t fileSize(StringRef Path) {
    sys::fs::file_status Status;
    return sys::fs::status(Path, Status) ? 0 : Status.getSize();
  }

  /// A parse's peak memory, from the size of the PCH of TU \p I.
  uint64_t estimate(size_t I, bool WithPCH) const {
    uint64_t PCHBytes = Preambles.pchBytes(I);
    if (!PCHBytes)
      return UnknownParseBytes;
    return std::max(MinParseBytes,
                    PCHBytes * (WithPCH ? PCHParseBytesPerPCHByte
                                        : FullParseBytesPerPCHByte));
  }

  void analyse() {
    std::vector<QueuedTU> Queue;
    for (size_t I = 0; I < Jobs.size(); ++I)
      if (!Plans[I].Hit)
        Queue.push_back({I, Plans[I].Size, Jobs[I].File});
    if (Queue.empty())
      return;
    std::vector<size_t> Builds = Preambles.pendingBuilds();
    Threads = threadsFor(Builds.size() + Queue.size());
    for (QueuedTU &Q : Queue)
      Q.WaitsForBuild = Preambles.waitsForBuild(Q.Index, Threads);
    sortForAnalysis(Queue);
    // The PCH builds go first.
    std::vector<std::function<void()>> Work;
    for (size_t G : Builds)
      Work.push_back([this, G] { buildPCH(G); });
    for (const QueuedTU &Q : Queue)
      Work.push_back([this, I = Q.Index] { analyseOne(I); });
    Progress = std::make_unique<ETAProgress>(Queue.size(), Audit.Progress);
    runInParallel(Work);
    Progress->finish();
  }

  /// -j, or the cores, but no more than \p WorkItems.
  unsigned threadsFor(size_t WorkItems) const {
    unsigned N = Options.Jobs ? Options.Jobs
                              : hardware_concurrency().compute_thread_count();
    return std::max(1u, std::min<unsigned>(N, WorkItems));
  }

  /// Runs \p Work on up to -j threads, in order of the list.
  void runInParallel(const std::vector<std::function<void()>> &Work) {
    Threads = threadsFor(Work.size());
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
  /// are analysed again with the program's summaries. A TU analysed again
  /// exports what it now knows (a function whose callee is in a third TU
  /// lifts that callee's requirements; a call after such a callee hands
  /// over its effects), so the rounds go on while what some TU reads
  /// changes: a fixpoint over the program, at most MaxCrossTURounds deep.
  void crossTranslationUnit() {
    // The second phase reads the program's facts from this file, through
    // the checks' `torch.Summaries` option.
    SmallString<256> File;
    TempFileRemover Temporary;
    if (!Audit.CacheDir.empty()) {
      File = Audit.CacheDir + "/summaries.json";
      sys::fs::make_absolute(File);
    } else if (sys::fs::createTemporaryFile("torch-tidy-summaries", "json",
                                            File)) {
      File.clear();
    } else {
      Temporary.Path = std::string(File);
    }
    // The digest of the facts each TU was last analysed with.
    std::vector<std::string> AnalysedWith(Results.size());
    for (unsigned Round = 0; Round < MaxCrossTURounds; ++Round) {
      std::vector<bool> FirstPhase;
      for (const std::string &Digest : AnalysedWith)
        FirstPhase.push_back(Digest.empty());
      CrossTUPlan Plan = planCrossTU(Results, FirstPhase);
      if (File.empty() || !writeSummaries(*Plan.Summaries, File)) {
        noteOnce("could not write the program's summaries to " +
                 std::string(File));
        return;
      }
      SummariesFile = std::string(File);
      std::vector<std::function<void()>> Work;
      bool FromCache = false;
      for (size_t K = 0; K < Plan.Rerun.size(); ++K) {
        size_t I = Plan.Rerun[K];
        const std::string &Read = Plan.ReadDigests[K];
        if (AnalysedWith[I] == Read)
          continue;
        if (AnalysedWith[I].empty())
          ++CrossTUs;
        AnalysedWith[I] = Read;
        std::string Key;
        if (!Plans[I].CacheKey.empty())
          Key = Plans[I].CacheKey + "-x" + Read.substr(0, 32);
        // Only after the TU's first-phase entry was read in this run, with
        // every dependency checked: a second-phase entry keeps just the
        // main file (reanalyse()), a cheap read on a warm audit.
        if (!Key.empty() && Plans[I].Hit)
          if (std::optional<TUResult> Hit = Cache.lookup(Key)) {
            Hit->File = Jobs[I].File;
            Results[I] = std::move(*Hit);
            ++CrossReused;
            FromCache = true;
            continue;
          }
        Work.push_back([this, I, Key] { reanalyse(I, Key); });
      }
      if (Work.empty() && !FromCache)
        break;
      ++CrossRounds;
      runInParallel(Work);
    }
    SummariesFile.clear();
  }

  /// Removes a temporary file when it goes out of scope.
  struct TempFileRemover {
    std::string Path;
    ~TempFileRemover() {
      if (!Path.empty())
        sys::fs::remove(Path);
    }
  };
  /// The program's facts for the cross-TU phase; "" outside it.
  std::string SummariesFile;

  void reanalyse(size_t I, const std::string &Key) {
    TUExtras Extras;
    Extras.CollectDependencies = Audit.UseResultCache;
    Extras.SummariesPath = SummariesFile;
    Extras.ExportSummaries = true; // for the next round
    bool WithPCH = false;
    TUResult R = parse(I, Extras, WithPCH);
    ++CrossAnalysed;
    llvm::erase_if(R.Dependencies, [&](const std::string &File) {
      return StringRef(File).starts_with(Audit.CacheDir);
    });
    if (Audit.UseResultCache && !Key.empty()) {
      TUResult Entry = R;
      auto Main = llvm::find(R.Dependencies, Jobs[I].File);
      if (Main != R.Dependencies.end())
        Entry.Dependencies = {*Main};
      Cache.store(Key, Entry);
    }
    Results[I] = std::move(R);
  }

  /// Runs TU \p I with the preamble its first analysis chose
  /// (TUPlan::Preamble), in full when that fails: the TU's text does not
  /// allow the PCH, or the PCH may be the cause of an error (a header
  /// changed during the run, say). \p WithPCH: whether the PCH served.
  TUResult parse(size_t I, TUExtras Extras, bool &WithPCH) {
    const TUJob &Job = Jobs[I];
    const SharedPreambles::Use &Use = Plans[I].Preamble;
    WithPCH = !Use.PCHPath.empty();
    MemoryReservation Reserve(Budget, estimate(I, WithPCH));
    Extras.PCHPath = Use.PCHPath;
    Extras.Preamble = Use.Facts;
    TUResult R = runTU(Job, Options, Extras);
    if (!WithPCH || (!R.CompileError && R.PreambleProblem.empty()))
      return R;
    Extras.PCHPath.clear();
    Extras.Preamble = nullptr;
    TUResult Full = runTU(Job, Options, Extras);
    if (!R.PreambleProblem.empty())
      Preambles.fellBack(I, "'" + Job.File + "': " + R.PreambleProblem);
    else if (!Full.CompileError)
      Preambles.fellBack(I, firstError(R));
    WithPCH = false;
    Plans[I].Preamble = {}; // the second phase parses it in full too
    return Full;
  }

  void buildPCH(size_t G) {
    // A PCH build peaks about as high as a full parse.
    MemoryReservation Reserve(Budget, UnknownParseBytes);
    Preambles.build(G);
  }

  void analyseOne(size_t I) {
    const TUJob &Job = Jobs[I];
    if (Audit.Summary)
      Progress->start(Job.File);
    else if (Options.OnStart)
      Options.OnStart(Job);
    TUExtras Extras;
    Extras.CollectDependencies = Audit.UseResultCache;
    Extras.ExportSummaries = Audit.CrossTU;
    Plans[I].Preamble = Preambles.start(I, Threads);
    bool WithPCH = false;
    TUResult R = parse(I, Extras, WithPCH);
    ++Analysed;
    UsedPCH += WithPCH;
    // Only the sources count: the PCH's own files are in the cache.
    llvm::erase_if(R.Dependencies, [&](const std::string &File) {
      return StringRef(File).starts_with(Audit.CacheDir);
    });
    if (Audit.UseResultCache)
      Cache.store(Plans[I].CacheKey, R);
    Results[I] = std::move(R);
    if (Audit.Summary)
      Progress->finished();
  }

  static std::string firstError(const TUResult &R) {
    for (const Finding &F : R.Findings)
      if (F.isCompilerError())
        return F.Message;
    return R.ToolError;
  }

  void noteOnce(const Twine &Message) {
    if (!Audit.Summary)
      return; // a plain run says nothing of its caches
    std::string Text = Message.str();
    std::lock_guard<std::mutex> Lock(Mutex);
    if (Noted.insert(Text).second)
      printNote(Text);
  }

  void summarise() {
    Preambles.finish();
    if (unsigned FellBack = Preambles.fellBackCount())
      printNote(formatv("the precompiled header could not be used for {0} "
                        "translation unit(s), which were parsed in full "
                        "(first: {1})",
                        FellBack, Preambles.fallbackExample()));
    std::string PCHs = Preambles.describeUsed();
    if (!PCHs.empty())
      PCHs = ": " + PCHs;
    std::string Parallel;
    if (Analysed)
      Parallel = formatv("; at most {0} at once within a {1} MiB memory budget",
                         Budget.peakHolders(), Budget.total() / MiB)
                     .str();
    if (Audit.Stats)
      *Audit.Stats = {Reused, Analysed, UsedPCH, Preambles.built()};
    printNote(formatv("audit: {0} translation unit(s): {1} from the result "
                      "cache, {2} analysed ({3} with a precompiled header, "
                      "{4} precompiled header(s) built{5}){6}",
                      Jobs.size(), unsigned(Reused), unsigned(Analysed),
                      unsigned(UsedPCH), Preambles.built(), PCHs, Parallel));
    if (CrossAnalysed || CrossReused)
      printNote(formatv("audit: across translation units, {0} translation "
                        "unit(s) analysed again with the program's summaries "
                        "in {1} round(s), {2} time(s) in all ({3} from the "
                        "result cache)",
                        CrossTUs, CrossRounds,
                        unsigned(CrossAnalysed + CrossReused),
                        unsigned(CrossReused)));
  }

  const std::vector<TUJob> &Jobs;
  const RunOptions &Options;
  const AuditOptions &Audit;
  FileDigests Digests;
  ResultCache Cache;
  MemoryBudget Budget;
  SharedPreambles Preambles;
  std::vector<TUPlan> Plans;
  std::vector<TUResult> Results;
  std::unique_ptr<ETAProgress> Progress;
  unsigned Threads = 1;

  std::mutex Mutex;
  std::set<std::string> Noted;
  std::atomic<unsigned> Reused{0}, Analysed{0}, UsedPCH{0}, CrossAnalysed{0},
      CrossReused{0};
  unsigned CrossTUs = 0, CrossRounds = 0;
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
