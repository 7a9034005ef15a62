//===--- PreamblePlan.cpp - torch-tidy driver -----------------------------===//

#include "PreamblePlan.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

using namespace llvm;

namespace torchtidy {

void sortForAnalysis(std::vector<QueuedTU> &Queue) {
  llvm::stable_sort(Queue, [](const QueuedTU &A, const QueuedTU &B) {
    if (A.WaitsForBuild != B.WaitsForBuild)
      return B.WaitsForBuild;
    return A.Size != B.Size ? A.Size > B.Size : A.File < B.File;
  });
}

enum class PCHStatus { Building, Ready, Failed };

struct SharedPreambles::Group {
  std::unique_ptr<SharedPCH> PCH;
  PCHStatus Status = PCHStatus::Failed; // guarded by Mutex
  unsigned ToAnalyse = 0;
  bool BuiltNow = false;
  unsigned Shadowed = 0;
  std::string ShadowExample;
};

SharedPreambles::SharedPreambles(Options O, FileDigests &Digests,
                                 std::function<void(const Twine &)> Note)
    : Opts(std::move(O)), Digests(Digests), Note(std::move(Note)) {}

SharedPreambles::~SharedPreambles() = default;

SharedPreambles::Group *SharedPreambles::groupOf(size_t I) const {
  return I < ByTU.size() ? ByTU[I] : nullptr;
}

/// Whether \p Prefix opens \p Includes.
static bool opens(ArrayRef<std::string> Prefix, ArrayRef<std::string> Includes) {
  return Prefix.size() <= Includes.size() &&
         llvm::equal(Prefix, Includes.take_front(Prefix.size()));
}

void SharedPreambles::plan(std::vector<PreambleInput> Inputs) {
  TUs = std::move(Inputs);
  ByTU.assign(TUs.size(), nullptr);
  std::vector<PrefixCandidate> Candidates(TUs.size());
  for (size_t I = 0; I < TUs.size(); ++I) {
    if (!TUs[I].Flags)
      continue;
    json::Array Key(TUs[I].Flags->KeyArgs);
    Key.push_back(TUs[I].SkipBodies);
    Candidates[I].FlagsKey =
        digestOf(formatv("{0}", json::Value(std::move(Key))).str());
    Candidates[I].Includes = systemPrefix(TUs[I].File, *TUs[I].Flags);
  }
  for (PrefixGroup &PG : planPrefixGroups(Candidates, Opts.MinMembers)) {
    auto G = std::make_unique<Group>();
    for (size_t I : PG.Members)
      G->ToAnalyse += TUs[I].Analysed;
    if (G->ToAnalyse == 0)
      continue;
    const PreambleInput &First = TUs[PG.Members.front()];
    SharedPCH::Request R{Opts.CacheDir, Opts.ToolId, First.Directory,
                         First.Flags->KeyArgs, PG.Includes, First.SkipBodies};
    // The longest PCH in the cache whose headers open the group's (say, an
    // audit's, for a plain run) serves as well as one of all of them.
    std::vector<std::vector<std::string>> Cached = SharedPCH::cachedPrefixes(R);
    llvm::stable_sort(Cached, [](const auto &A, const auto &B) {
      return A.size() > B.size();
    });
    for (std::vector<std::string> &Prefix : Cached) {
      if (!opens(Prefix, PG.Includes))
        continue;
      SharedPCH::Request Shorter = R;
      Shorter.Includes = std::move(Prefix);
      auto PCH = std::make_unique<SharedPCH>(std::move(Shorter), Digests);
      if (PCH->check() == SharedPCH::State::Ready) {
        G->PCH = std::move(PCH);
        G->Status = PCHStatus::Ready;
        break;
      }
    }
    if (!G->PCH) {
      G->PCH = std::make_unique<SharedPCH>(std::move(R), Digests);
      std::string Prefix = describePrefix(PG.Includes);
      bool Enough = G->ToAnalyse >= Opts.MinMembers;
      switch (G->PCH->check()) {
      case SharedPCH::State::Ready:
        G->Status = PCHStatus::Ready;
        break;
      case SharedPCH::State::Unusable:
        Note(formatv("not using a precompiled header for {0}: {1}; its "
                     "translation units are parsed in full",
                     Prefix, G->PCH->reason()));
        break;
      case SharedPCH::State::Stale:
        if (Enough)
          Note(formatv("the precompiled header of {0} is stale ({1}); "
                       "rebuilding it",
                       Prefix, G->PCH->reason()));
        [[fallthrough]];
      case SharedPCH::State::Missing:
        G->Status = Enough ? PCHStatus::Building : PCHStatus::Failed;
        break;
      }
    }
    for (size_t I : PG.Members)
      ByTU[I] = G.get();
    Groups.push_back(std::move(G));
  }
}

std::vector<size_t> SharedPreambles::pendingBuilds() const {
  std::lock_guard<std::mutex> Lock(Mutex);
  std::vector<size_t> Pending;
  for (size_t G = 0; G < Groups.size(); ++G)
    if (Groups[G]->Status == PCHStatus::Building)
      Pending.push_back(G);
  return Pending;
}

void SharedPreambles::build(size_t Index) {
  Group &G = *Groups[Index];
  bool Ready = G.PCH->build();
  if (Ready)
    ++Built;
  else
    Note(formatv("not using a precompiled header for {0}: {1}; its "
                 "translation units are parsed in full",
                 describePrefix(G.PCH->request().Includes),
                 G.PCH->reason()));
  {
    std::lock_guard<std::mutex> Lock(Mutex);
    G.BuiltNow = Ready;
    G.Status = Ready ? PCHStatus::Ready : PCHStatus::Failed;
  }
  Changed.notify_all();
}

bool SharedPreambles::waits(const Group &G, unsigned Threads) {
  return G.Status == PCHStatus::Building && G.ToAnalyse >= std::max(1u, Threads);
}

bool SharedPreambles::waitsForBuild(size_t I, unsigned Threads) const {
  Group *G = groupOf(I);
  std::lock_guard<std::mutex> Lock(Mutex);
  return G && waits(*G, Threads);
}

SharedPreambles::Use SharedPreambles::start(size_t I, unsigned Threads) {
  Group *G = groupOf(I);
  if (!G)
    return {};
  std::unique_lock<std::mutex> Lock(Mutex);
  if (waits(*G, Threads))
    Changed.wait(Lock, [&] { return G->Status != PCHStatus::Building; });
  if (G->Status != PCHStatus::Ready)
    return {};
  std::string Shadow =
      G->PCH->shadows().shadowingHeader(TUs[I].Flags->ProjectDirs);
  if (!Shadow.empty()) {
    if (G->Shadowed++ == 0)
      G->ShadowExample = Shadow;
    return {};
  }
  Used.insert(G);
  return {G->PCH->path(), &G->PCH->facts()};
}

void SharedPreambles::fellBack(size_t, StringRef Why) {
  std::lock_guard<std::mutex> Lock(Mutex);
  if (FallbackExample.empty())
    FallbackExample = Why.str();
  ++FellBack;
}

uint64_t SharedPreambles::pchBytes(size_t I) const {
  Group *G = groupOf(I);
  std::lock_guard<std::mutex> Lock(Mutex);
  return G && G->Status == PCHStatus::Ready ? G->PCH->bytes() : 0;
}

void SharedPreambles::finish() {
  std::lock_guard<std::mutex> Lock(Mutex);
  for (const auto &G : Groups)
    if (G->Shadowed)
      Note(formatv("{0} translation unit(s) did not use the precompiled "
                   "header of {1}: their include dirs hold '{2}', which "
                   "would be found instead of one of its headers",
                   G->Shadowed, describePrefix(G->PCH->request().Includes),
                   G->ShadowExample));
}

std::string SharedPreambles::describeUsed() const {
  std::lock_guard<std::mutex> Lock(Mutex);
  uint64_t Bytes = 0;
  double Seconds = 0;
  unsigned Count = 0;
  for (const auto &G : Groups)
    if (G->BuiltNow || Used.count(G.get())) {
      Bytes += G->PCH->bytes();
      Seconds += G->PCH->buildSeconds();
      ++Count;
    }
  if (!Count)
    return "";
  return formatv("{0} MiB, built in {1:f1} s", (Bytes + (1 << 19)) >> 20,
                 Seconds)
      .str();
}

} // namespace torchtidy
