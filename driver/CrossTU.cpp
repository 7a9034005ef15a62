//===--- CrossTU.cpp - torch-tidy driver ----------------------------------===//

#include "CrossTU.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using clang::tidy::torch::ExternalSummaries;

namespace torchtidy {

static StringSet<> stringSet(const json::Array *Strings) {
  StringSet<> Out;
  if (Strings)
    for (const json::Value &V : *Strings)
      if (std::optional<StringRef> S = V.getAsString())
        Out.insert(*S);
  return Out;
}

CrossTUPlan planCrossTU(const std::vector<TUResult> &Results) {
  CrossTUPlan Plan;
  auto Merged = std::make_shared<ExternalSummaries>();
  std::vector<std::optional<json::Object>> Exports(Results.size());
  // In the order of the jobs, which does not depend on -j; a function that
  // two TUs define differently has no summary (ExternalSummaries::merge).
  for (size_t I = 0; I < Results.size(); ++I) {
    if (Results[I].SummaryExport.empty())
      continue;
    Expected<json::Value> V = json::parse(Results[I].SummaryExport);
    if (!V) {
      consumeError(V.takeError());
      continue;
    }
    if (const json::Object *O = V->getAsObject()) {
      if (Error E = Merged->addExport(*O)) {
        consumeError(std::move(E));
        continue;
      }
      Exports[I] = *O;
    }
  }
  Merged->finishEntries();

  // Which TUs call each function: an entry context matters to the TU that
  // defines the function only when another TU calls it.
  StringMap<SmallVector<size_t, 2>> CallingTUs;
  for (size_t I = 0; I < Results.size(); ++I)
    if (Exports[I])
      if (const json::Array *Calls = Exports[I]->getArray("calls"))
        for (const json::Value &C : *Calls)
          if (const json::Object *O = C.getAsObject())
            if (std::optional<StringRef> Callee = O->getString("callee")) {
              auto &TUs = CallingTUs[*Callee];
              if (TUs.empty() || TUs.back() != I)
                TUs.push_back(I);
            }

  for (size_t I = 0; I < Results.size(); ++I) {
    if (!Exports[I])
      continue;
    const json::Object &Export = *Exports[I];
    StringSet<> Own;
    if (const json::Object *Fs = Export.getObject("functions"))
      for (const auto &F : *Fs)
        Own.insert(F.first.str());
    // What its checks asked for (ExternalReads); an export without the
    // list may have asked for anything.
    const json::Object *Asked = Export.getObject("reads");
    StringSet<> AskedSummaries, AskedEntries;
    if (Asked) {
      AskedSummaries = stringSet(Asked->getArray("summaries"));
      AskedEntries = stringSet(Asked->getArray("entries"));
    }
    // The facts this TU reads: the summaries of functions defined elsewhere
    // that it calls, and the entry contexts that other TUs' calls give the
    // functions it defines; of those, the ones its checks asked for. A
    // second analysis differs from the first only through them.
    std::vector<std::string> Reads;
    if (const json::Array *Calls = Export.getArray("calls"))
      for (const json::Value &C : *Calls) {
        const json::Object *O = C.getAsObject();
        std::optional<StringRef> Callee =
            O ? O->getString("callee") : std::nullopt;
        if (Callee && Merged->contains(*Callee) && !Own.contains(*Callee) &&
            (!Asked || AskedSummaries.contains(*Callee)))
          Reads.push_back(Callee->str());
      }
    for (const auto &F : Own)
      if (Merged->hasEntry(F.first()) &&
          (!Asked || AskedEntries.contains(F.first())) &&
          llvm::any_of(CallingTUs.lookup(F.first()),
                       [&](size_t Caller) { return Caller != I; }))
        Reads.push_back(F.first().str());
    if (Reads.empty())
      continue;
    llvm::sort(Reads);
    Reads.erase(std::unique(Reads.begin(), Reads.end()), Reads.end());
    Plan.Rerun.push_back(I);
    Plan.ReadDigests.push_back(Merged->digestOf(Reads));
  }
  Plan.Summaries = std::move(Merged);
  return Plan;
}

bool writeSummaries(const ExternalSummaries &Summaries, StringRef Path) {
  if (sys::fs::create_directories(sys::path::parent_path(Path)))
    return false;
  Error E = writeToOutput(Path, [&](raw_ostream &OS) {
    OS << formatv("{0:2}", json::Value(Summaries.toJSON())) << '\n';
    return Error::success();
  });
  if (E) {
    consumeError(std::move(E));
    return false;
  }
  return true;
}

} // namespace torchtidy
