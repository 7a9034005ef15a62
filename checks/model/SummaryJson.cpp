//===--- SummaryJson.cpp - torch-tidy -------------------------------------===//
//
// The exported facts, version 2:
//
//   {"version": 5, "main": USR?,
//    "functions": {USR: SUMMARY},            (FactsJson.h)
//    "calls": [{"callee": USR, "caller": USR, "path": PATH, "loop": LOOP,
//               "values": [{"entry": ENTRY, "facts": FACTS}]}],
//    "addressTaken": [USR], "reads": {"summaries": [USR], "entries": [USR]},
//    "entries": {USR: {"path": PATH, "loop": LOOP, "count": N,
//                      "values": [{"entry": ENTRY, "facts": FACTS}]}}}
//
// A call's facts are its caller's, in the caller's terms: a fact that is the
// caller's own entry value (its "entry" names the caller's parameter) is
// resolved through the caller's entry, over the whole program.
//
//===----------------------------------------------------------------------===//

#include "ExternalSummaries.h"
#include "FactsJson.h"
#include "ProgramModel.h"
#include "clang/Index/USRGeneration.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"

namespace clang::tidy::torch {

std::string usrOf(const Decl &D) {
  llvm::SmallString<128> Buf;
  if (index::generateUSRForDecl(&D, Buf))
    return "";
  return std::string(Buf);
}

//===--- Merging ------------------------------------------------------------===//

llvm::Error ExternalSummaries::merge(const llvm::json::Object &Document) {
  std::optional<int64_t> Version = Document.getInteger("version");
  if (Version != SummaryFormatVersion)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "summary format version %lld is not the supported version %d",
        static_cast<long long>(Version.value_or(0)), SummaryFormatVersion);
  if (const llvm::json::Object *Fs = Document.getObject("functions"))
    for (const auto &[USR, V] : *Fs)
      if (const llvm::json::Object *O = V.getAsObject()) {
        auto [It, New] = Functions.try_emplace(USR.str(), *O);
        // Two programs of one database may each define a `train(Net&)`:
        // different definitions of one USR are nobody's facts.
        if (!New && It->second != *O)
          Conflicting.insert(USR.str());
      }
  if (const llvm::json::Object *Es = Document.getObject("entries"))
    for (const auto &[USR, V] : *Es)
      if (const llvm::json::Object *O = V.getAsObject())
        Entries.try_emplace(USR.str(), *O);
  HasMain |= Document.getBoolean("definesMain").value_or(false) ||
             Document.getString("main").has_value();
  if (const llvm::json::Array *Ps = Document.getArray("programsWithMain")) {
    KnowsFiles = true;
    for (const llvm::json::Value &V : *Ps)
      if (std::optional<llvm::StringRef> F = V.getAsString())
        ProgramsWithMain.insert(*F);
  }
  return llvm::Error::success();
}

llvm::Error ExternalSummaries::addExport(const llvm::json::Object &Export) {
  if (llvm::Error E = merge(Export))
    return E;
  unsigned TU = ExportFiles.size();
  ExportFiles.push_back(Export.getString("file").value_or("").str());
  ExportDefinesMain.push_back(Export.getString("main").has_value());
  KnowsFiles |= !ExportFiles.back().empty();
  if (const llvm::json::Object *Fs = Export.getObject("functions"))
    for (const auto &F : *Fs)
      if (auto [It, New] = DefinedIn.try_emplace(F.first, TU); !New)
        It->second = ~0u;
  if (const llvm::json::Array *Cs = Export.getArray("calls"))
    for (const llvm::json::Value &V : *Cs)
      if (const llvm::json::Object *O = V.getAsObject()) {
        Calls.push_back(*O);
        CallTU.push_back(TU);
      }
  if (const llvm::json::Array *As = Export.getArray("addressTaken"))
    for (const llvm::json::Value &V : *As)
      if (std::optional<llvm::StringRef> U = V.getAsString())
        AddressTaken.insert(*U);
  if (std::optional<llvm::StringRef> Main = Export.getString("main"))
    Mains.insert(*Main);
  return llvm::Error::success();
}

bool ExternalSummaries::definesMainFor(llvm::StringRef MainFile) const {
  return KnowsFiles ? ProgramsWithMain.contains(MainFile) : HasMain;
}

/// The programs of a database: TUs joined by their calls, each with a main
/// or not (ProgramsOf[TU] is its program's representative).
static std::vector<unsigned>
programsOf(unsigned TUs, llvm::ArrayRef<std::pair<unsigned, unsigned>> Links) {
  std::vector<unsigned> Parent(TUs);
  for (unsigned I = 0; I < TUs; ++I)
    Parent[I] = I;
  auto Find = [&](unsigned X) {
    while (Parent[X] != X)
      X = Parent[X] = Parent[Parent[X]];
    return X;
  };
  for (auto [A, B] : Links)
    Parent[Find(A)] = Find(B);
  for (unsigned I = 0; I < TUs; ++I)
    Parent[I] = Find(I);
  return Parent;
}

//===--- The program's entries ---------------------------------------------===//

namespace {

/// \p Facts with every field that is its caller's entry value replaced by
/// what \p CallerValues (the caller's entry values) say of it.
llvm::json::Object resolveFacts(const llvm::json::Object &Facts,
                                const llvm::json::Array *CallerValues) {
  llvm::json::Object Out;
  for (const auto &[Key, Value] : Facts) {
    const llvm::json::Object *Field = Value.getAsObject();
    const llvm::json::Value *Entry = Field ? Field->get("entry") : nullptr;
    if (!Entry) {
      Out[Key] = Value;
      continue;
    }
    if (!CallerValues)
      continue;
    for (const llvm::json::Value &V : *CallerValues) {
      const llvm::json::Object *O = V.getAsObject();
      if (!O || !O->get("entry") || !(*O->get("entry") == *Entry))
        continue;
      if (const llvm::json::Object *Known = O->getObject("facts"))
        if (const llvm::json::Object *Same = Known->getObject(Key)) {
          llvm::json::Object Copy = *Same;
          Copy.erase("entry");
          Out[Key] = std::move(Copy);
        }
    }
  }
  return Out;
}

} // namespace

void ExternalSummaries::finishEntries() {
  for (const auto &USR : Conflicting)
    Functions.erase(USR.getKey());
  // The programs: a call joins its TU to the one TU that defines the callee.
  // A callee defined in several TUs is inline, or separate programs reuse
  // its name; neither joins programs.
  std::vector<std::pair<unsigned, unsigned>> Links;
  for (size_t I = 0; I < Calls.size(); ++I)
    if (auto It = DefinedIn.find(Calls[I].getString("callee").value_or(""));
        It != DefinedIn.end() && It->second != ~0u)
      Links.emplace_back(CallTU[I], It->second);
  std::vector<unsigned> Program = programsOf(ExportFiles.size(), Links);
  llvm::DenseSet<unsigned> WithMain;
  for (unsigned TU = 0; TU < ExportFiles.size(); ++TU)
    if (ExportDefinesMain[TU])
      WithMain.insert(Program[TU]);
  for (unsigned TU = 0; TU < ExportFiles.size(); ++TU)
    if (WithMain.contains(Program[TU]) && !ExportFiles[TU].empty())
      ProgramsWithMain.insert(ExportFiles[TU]);

  // The calls of each function, and each function's callers.
  llvm::StringMap<std::vector<std::pair<const llvm::json::Object *, unsigned>>>
      CallsOf;
  for (size_t I = 0; I < Calls.size(); ++I) {
    llvm::StringRef Callee = Calls[I].getString("callee").value_or("");
    if (!Callee.empty() && !AddressTaken.contains(Callee) &&
        !Conflicting.contains(Callee))
      CallsOf[Callee].push_back({&Calls[I], CallTU[I]});
  }
  // A program starts in its main, or, without one, in every function that
  // no one calls.
  auto StartOf = [&](llvm::StringRef Caller,
                     unsigned TU) -> std::optional<PathFacts> {
    if (CallsOf.count(Caller))
      return std::nullopt;
    PathFacts P;
    P.Grad = GradMode::Enabled;
    // A function that its program's main does not reach is unreachable.
    P.Cuda = !WithMain.contains(Program[TU]) || Mains.contains(Caller) ||
                     Caller.empty()
                 ? CudaGuard::Unguarded
                 : CudaGuard::Checked;
    return P;
  };

  struct Entry {
    PathFacts Path;
    LoopContext Loop;
    llvm::json::Array Values;
    int64_t Count = 0;
    llvm::json::Object LoopJSON;
  };
  // Must-facts start at the top (every call checked), may-facts at the
  // bottom, values at "nothing seen yet"; rounds until nothing changes.
  llvm::StringMap<Entry> Next;
  for (const auto &C : CallsOf) {
    Entry &E = Next[C.getKey()];
    E.Path.Cuda = CudaGuard::Checked;
    E.Path.Grad = GradMode::Entry;
  }
  for (unsigned Round = 0; Round < 32; ++Round) {
    bool Changed = false;
    for (auto &Item : Next) {
      llvm::StringRef Callee = Item.getKey();
      Entry Joined;
      bool First = true;
      int64_t Count = 0;
      bool Training = false, InLoop = false;
      llvm::json::Object LoopJSON;
      for (auto [C, CallerTU] : CallsOf[Callee]) {
        llvm::StringRef Caller = C->getString("caller").value_or("");
        const llvm::json::Object *Path = C->getObject("path");
        PathFacts Here;
        bool SelectedIfUnchecked = false;
        Here.Cuda = CudaGuard::Entry;
        Here.Grad = GradMode::Entry;
        if (Path) {
          llvm::StringRef Cuda = Path->getString("cuda").value_or("entry");
          Here.Cuda = Cuda == "checked"     ? CudaGuard::Checked
                      : Cuda == "unguarded" ? CudaGuard::Unguarded
                                            : CudaGuard::Entry;
          llvm::StringRef Grad = Path->getString("grad").value_or("entry");
          Here.Grad = Grad == "enabled"    ? GradMode::Enabled
                      : Grad == "disabled" ? GradMode::Disabled
                      : Grad == "unknown"  ? GradMode::Unknown
                                           : GradMode::Entry;
          Here.CountAtLeast = Path->getInteger("count").value_or(0);
          Here.CudaSelectedBefore = Path->getBoolean("selected").value_or(false);
          SelectedIfUnchecked =
              Path->getBoolean("selectedIfUnchecked").value_or(false);
        }
        const llvm::json::Array *CallerValues = nullptr;
        PathFacts CallerPath;
        bool CallerTraining = false, CallerInLoop = false;
        if (auto It = Next.find(Caller); It != Next.end()) {
          CallerPath = It->second.Path;
          CallerValues = &It->second.Values;
          CallerTraining = It->second.LoopJSON.get("training");
          CallerInLoop = It->second.LoopJSON.get("loop");
          Count = std::max(Count, It->second.Count);
        } else if (std::optional<PathFacts> Start = StartOf(Caller, CallerTU)) {
          CallerPath = *Start;
        } else {
          continue;
        }
        if (Here.Cuda == CudaGuard::Entry)
          Here.Cuda = CallerPath.Cuda;
        if (Here.Grad == GradMode::Entry)
          Here.Grad = CallerPath.Grad;
        Here.CudaSelectedBefore |=
            CallerPath.CudaSelectedBefore ||
            (SelectedIfUnchecked && CallerPath.Cuda == CudaGuard::Unguarded);
        Count = std::max(Count, Here.CountAtLeast);
        const llvm::json::Object *Loop = C->getObject("loop");
        bool EveryCall = Loop && Loop->getBoolean("everyCall").value_or(false);
        if ((Loop && Loop->get("training")) || (EveryCall && CallerTraining)) {
          Training = true;
          if (Loop && Loop->get("training"))
            LoopJSON = *Loop;
        }
        InLoop |= (Loop && Loop->get("loop")) || CallerInLoop;
        // The first loop met names where the callee repeats, and whether
        // it runs a backward, as a plain run's context keeps them.
        if (!LoopJSON.get("loop")) {
          const llvm::json::Object *From =
              Loop && Loop->get("loop") ? Loop
              : CallerInLoop            ? &Next.find(Caller)->second.LoopJSON
                                        : nullptr;
          if (From) {
            LoopJSON["loop"] = *From->get("loop");
            if (std::optional<bool> Without = From->getBoolean("withoutBackward"))
              LoopJSON["withoutBackward"] = *Without;
          }
        }
        llvm::json::Array Values;
        if (const llvm::json::Array *Vs = C->getArray("values"))
          for (const llvm::json::Value &V : *Vs)
            if (const llvm::json::Object *O = V.getAsObject())
              if (const llvm::json::Object *F = O->getObject("facts"))
                Values.push_back(llvm::json::Object{
                    {"entry", O->get("entry") ? *O->get("entry") : nullptr},
                    {"facts", resolveFacts(*F, CallerValues)}});
        if (First) {
          Joined.Path = Here;
          Joined.Values = std::move(Values);
          First = false;
          continue;
        }
        Joined.Path.Cuda = std::min(Joined.Path.Cuda, Here.Cuda);
        Joined.Path.CudaSelectedBefore &= Here.CudaSelectedBefore;
        if (Joined.Path.Grad != Here.Grad)
          Joined.Path.Grad = GradMode::Unknown;
        // Values: what every call agrees on.
        llvm::json::Array Kept;
        for (llvm::json::Value &Mine : Joined.Values)
          for (const llvm::json::Value &Theirs : Values) {
            llvm::json::Object *A = Mine.getAsObject();
            const llvm::json::Object *B = Theirs.getAsObject();
            if (A && B && A->get("entry") && B->get("entry") &&
                *A->get("entry") == *B->get("entry")) {
              const llvm::json::Object *FA = A->getObject("facts");
              const llvm::json::Object *FB = B->getObject("facts");
              if (!FA || !FB)
                continue;
              llvm::json::Object Entry;
              Entry["entry"] = *A->get("entry");
              Entry["facts"] = joinFactObjects(*FA, *FB);
              Kept.push_back(std::move(Entry));
            }
          }
        Joined.Values = std::move(Kept);
      }
      if (First)
        continue; // no call counted yet
      if (Training && !LoopJSON.get("training"))
        LoopJSON["training"] = llvm::json::Object{};
      if (InLoop && !LoopJSON.get("loop"))
        LoopJSON["loop"] = llvm::json::Object{};
      Entry &E = Item.second;
      if (E.Path.Cuda != Joined.Path.Cuda || E.Path.Grad != Joined.Path.Grad ||
          E.Path.CudaSelectedBefore != Joined.Path.CudaSelectedBefore ||
          E.Count != Count || !(E.Values == Joined.Values) ||
          !(E.LoopJSON == LoopJSON)) {
        E.Path.Cuda = Joined.Path.Cuda;
        E.Path.Grad = Joined.Path.Grad;
        E.Path.CudaSelectedBefore = Joined.Path.CudaSelectedBefore;
        E.Count = Count;
        E.Values = std::move(Joined.Values);
        E.LoopJSON = std::move(LoopJSON);
        Changed = true;
      }
    }
    if (!Changed)
      break;
  }
  static constexpr const char *CudaName[] = {"unguarded", "entry", "checked"};
  static constexpr const char *GradName[] = {"entry", "enabled", "disabled",
                                             "unknown"};
  for (auto &Item : Next) {
    const Entry &E = Item.second;
    llvm::json::Object Path{{"cuda", CudaName[unsigned(E.Path.Cuda)]},
                            {"grad", GradName[unsigned(E.Path.Grad)]},
                            {"count", int64_t(0)}};
    if (E.Path.CudaSelectedBefore)
      Path["selected"] = true;
    Entries[Item.getKey()] = llvm::json::Object{
        {"path", std::move(Path)},
        {"count", E.Count},
        {"loop", llvm::json::Object(E.LoopJSON)},
        {"values", llvm::json::Array(E.Values)}};
  }
}

//===--- Files --------------------------------------------------------------===//

llvm::Expected<std::shared_ptr<ExternalSummaries>>
ExternalSummaries::parse(llvm::StringRef Text) {
  llvm::Expected<llvm::json::Value> V = llvm::json::parse(Text);
  if (!V)
    return V.takeError();
  const llvm::json::Object *O = V->getAsObject();
  if (!O)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "not a JSON object");
  auto S = std::make_shared<ExternalSummaries>();
  if (llvm::Error E = S->merge(*O))
    return std::move(E);
  return S;
}

llvm::Expected<std::shared_ptr<ExternalSummaries>>
ExternalSummaries::load(llvm::StringRef Path) {
  llvm::SmallString<256> File(Path);
  if (llvm::sys::fs::is_directory(Path))
    llvm::sys::path::append(File, "summaries.json");
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> Buffer =
      llvm::MemoryBuffer::getFile(File);
  if (!Buffer)
    return llvm::createStringError(Buffer.getError(), "cannot read '%s': %s",
                                   File.c_str(),
                                   Buffer.getError().message().c_str());
  llvm::Expected<std::shared_ptr<ExternalSummaries>> S =
      parse((*Buffer)->getBuffer());
  if (!S)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "'%s' is not a torch-tidy summary file: %s",
                                   File.c_str(),
                                   llvm::toString(S.takeError()).c_str());
  return S;
}

std::optional<FunctionSummary>
ExternalSummaries::lookup(const FunctionDecl &F, ProgramModel &Program) const {
  auto It = Functions.find(usrOf(F));
  if (It == Functions.end() || Conflicting.contains(It->getKey()))
    return std::nullopt;
  return FactReader(Program, &F).summary(It->second);
}

std::optional<EntryContext> ExternalSummaries::entry(llvm::StringRef USR,
                                                     const FunctionDecl &F,
                                                     ProgramModel &Program) const {
  auto It = Entries.find(USR);
  if (It == Entries.end())
    return std::nullopt;
  const llvm::json::Object &O = It->second;
  FactReader Reader(Program, &F);
  EntryContext C;
  C.Root = false;
  C.Entry.path() = Reader.pathFacts(O.getObject("path"));
  C.Loop = Reader.loop(O.getObject("loop"));
  C.CountAtLeast = O.getInteger("count").value_or(0);
  if (const llvm::json::Array *Values = O.getArray("values"))
    for (const llvm::json::Value &V : *Values) {
      const llvm::json::Object *Item = V.getAsObject();
      if (!Item)
        continue;
      const ValueDecl *D = Reader.entry(Item->get("entry"));
      if (!D)
        continue;
      // A device this TU cannot name (a variable of the caller's TU) is
      // still a device variable.
      ValueFacts Facts = asEntryValue(Reader.facts(Item->getObject("facts")), *D);
      Location L = isa<FieldDecl>(D) ? Location::member(cast<FieldDecl>(D))
                   : cast<VarDecl>(D)->hasGlobalStorage() && !isa<ParmVarDecl>(D)
                       ? Location::global(D)
                       : Location::local(D);
      C.Entry.set(L, Facts);
    }
  return C;
}

llvm::json::Object ExternalSummaries::toJSON() const {
  // Sorted, so that the file is the same bytes however it was merged.
  std::vector<llvm::StringRef> Names;
  for (const auto &F : Functions)
    if (!Conflicting.contains(F.getKey()))
      Names.push_back(F.getKey());
  llvm::sort(Names);
  llvm::json::Object Fs, Es;
  for (llvm::StringRef N : Names)
    Fs[N] = llvm::json::Object(Functions.find(N)->second);
  Names.clear();
  for (const auto &E : Entries)
    Names.push_back(E.getKey());
  llvm::sort(Names);
  for (llvm::StringRef N : Names)
    Es[N] = llvm::json::Object(Entries.find(N)->second);
  std::vector<llvm::StringRef> Files;
  for (const auto &F : ProgramsWithMain)
    Files.push_back(F.getKey());
  llvm::sort(Files);
  llvm::json::Array Programs;
  for (llvm::StringRef F : Files)
    Programs.push_back(F);
  llvm::json::Object Out{{"version", SummaryFormatVersion},
                         {"definesMain", HasMain},
                         {"programsWithMain", std::move(Programs)},
                         {"functions", std::move(Fs)},
                         {"entries", std::move(Es)}};
  return Out;
}

bool ExternalSummaries::sameEntry(llvm::StringRef USR,
                                  const ExternalSummaries &Other) const {
  auto Mine = Entries.find(USR), Theirs = Other.Entries.find(USR);
  if (Mine == Entries.end() || Theirs == Other.Entries.end())
    return (Mine == Entries.end()) == (Theirs == Other.Entries.end());
  return Mine->second == Theirs->second;
}

std::string
ExternalSummaries::digestOf(llvm::ArrayRef<std::string> USRs) const {
  llvm::SHA256 Hash;
  for (const std::string &U : USRs) {
    Hash.update(U);
    auto F = Functions.find(U);
    if (F != Functions.end())
      Hash.update(llvm::formatv("{0}", llvm::json::Value(
                                           llvm::json::Object(F->second)))
                      .str());
    auto E = Entries.find(U);
    if (E != Entries.end())
      Hash.update(llvm::formatv("{0}", llvm::json::Value(
                                           llvm::json::Object(E->second)))
                      .str());
  }
  return llvm::toHex(Hash.result(), /*LowerCase=*/true);
}

} // namespace clang::tidy::torch
