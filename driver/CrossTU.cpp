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

/// The strings of \p Array (none when it is missing).
static std::vector<StringRef> strings(const json::Array *Array) {
  std::vector<StringRef> Out;
  if (Array)
    for (const json::Value &V : *Array)
      if (std::optional<StringRef> S = V.getAsString())
        Out.push_back(*S);
  return Out;
}

/// The entry contexts that TU \p Export's own calls give its functions:
/// what its first analysis knew without the rest of the program.
static ExternalSummaries ownEntries(const json::Object &Export) {
  ExternalSummaries Own;
  if (Error E = Own.addExport(Export))
    consumeError(std::move(E));
  Own.finishEntries();
  return Own;
}

CrossTUPlan planCrossTU(const std::vector<TUResult> &Results,
                        const std::vector<bool> &FirstPhase) {
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

  // Which TUs call each function without defining it: an entry context
  // matters to the TU that defines the function only when such a TU calls
  // it. A TU that defines it too (an inline function, or one name in
  // separate programs) calls its own definition and analyses those calls
  // itself.
  StringMap<SmallVector<size_t, 2>> CallingTUs;
  for (size_t I = 0; I < Results.size(); ++I) {
    if (!Exports[I])
      continue;
    const json::Object *Defined = Exports[I]->getObject("functions");
    if (const json::Array *Calls = Exports[I]->getArray("calls"))
      for (const json::Value &C : *Calls)
        if (const json::Object *O = C.getAsObject())
          if (std::optional<StringRef> Callee = O->getString("callee")) {
            if (Defined && Defined->get(*Callee))
              continue;
            auto &TUs = CallingTUs[*Callee];
            if (TUs.empty() || TUs.back() != I)
              TUs.push_back(I);
          }
  }

  for (size_t I = 0; I < Results.size(); ++I) {
    if (!Exports[I])
      continue;
    const json::Object &Export = *Exports[I];
    // The facts of other TUs its checks asked for (ExternalReads); a second
    // analysis differs from the first only through those the program knows:
    // the summaries of functions defined elsewhere, and the entry contexts
    // that other TUs' calls give the functions it defines. (Every export
    // lists them; one read back without the list is treated as asking
    // nothing, as a TU without an export.)
    const json::Object *Asked = Export.getObject("reads");
    if (!Asked)
      continue;
    StringSet<> Own;
    if (const json::Object *Fs = Export.getObject("functions"))
      for (const auto &F : *Fs)
        Own.insert(F.first.str());
    std::vector<std::string> Reads;
    for (StringRef Callee : strings(Asked->getArray("summaries")))
      if (Merged->contains(Callee))
        Reads.push_back(Callee.str());
    // A function that other TUs call too (an inline function, a copy)
    // often gets from them what its own TU's calls give it already.
    std::optional<ExternalSummaries> OwnEntries;
    for (StringRef F : strings(Asked->getArray("entries"))) {
      if (!Own.contains(F) || !Merged->hasEntry(F) ||
          llvm::none_of(CallingTUs.lookup(F),
                        [&](size_t Caller) { return Caller != I; }))
        continue;
      if (I < FirstPhase.size() && FirstPhase[I]) {
        if (!OwnEntries)
          OwnEntries = ownEntries(Export);
        if (Merged->sameEntry(F, *OwnEntries))
          continue;
      }
      Reads.push_back(F.str());
    }
    // A function no one calls starts the program, unless the program has a
    // main (every export says whether it asked).
    if (Asked->getBoolean("main").value_or(false) &&
        Merged->definesMainFor(Export.getString("file").value_or("")))
      Reads.push_back("<the program has a main>");
    if (Reads.empty())
      continue;
    llvm::sort(Reads);
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
