//===--- ResultCache.cpp - torch-tidy driver ------------------------------===//
//
// An entry is JSON:
//   {"version": 3, "file": ..., "enabledChecks": [...],
//    "findings": [<Finding>...], "dependencies": [{"file", "digest"}...],
//    "summaryExport": {...}, "firstCompileError": "...",
//    "absentIncludes": ["<path>"...]}
// where summaryExport, when present, is what the TU exported for the
// cross-TU phase (checks/model/ExternalSummaries.h); a TU with compiler
// errors has firstCompileError, and absentIncludes when a header was not
// found: the entry holds while none of those paths exists.
// Findings are toJSON(Finding) plus what the text format needs to print them
// exactly as a fresh run does: byte offsets, highlighted ranges, the source
// lines, and whether a warning was promoted to an error.
//
//===----------------------------------------------------------------------===//

#include "ResultCache.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace llvm;

namespace torchtidy {
namespace {

constexpr int EntryVersion = 3;

json::Array rangesToJSON(const std::vector<ByteRange> &Ranges) {
  json::Array Out;
  for (const ByteRange &R : Ranges)
    Out.push_back(json::Array{R.Offset, R.Length});
  return Out;
}

bool rangesFromJSON(const json::Object &O, std::vector<ByteRange> &Ranges) {
  const json::Array *A = O.getArray("ranges");
  if (!A)
    return false;
  for (const json::Value &V : *A) {
    const json::Array *Pair = V.getAsArray();
    if (!Pair || Pair->size() != 2)
      return false;
    std::optional<int64_t> Offset = (*Pair)[0].getAsInteger();
    std::optional<int64_t> Length = (*Pair)[1].getAsInteger();
    if (!Offset || !Length)
      return false;
    Ranges.push_back(
        {static_cast<unsigned>(*Offset), static_cast<unsigned>(*Length)});
  }
  return true;
}

/// Adds the text format's extras to a location-bearing object.
void addDetails(json::Value &V, const Location &L, StringRef SourceLine,
                const std::vector<ByteRange> &Ranges) {
  json::Object &O = *V.getAsObject();
  O["offset"] = L.Offset;
  O["sourceLine"] = SourceLine;
  O["ranges"] = rangesToJSON(Ranges);
}

bool readDetails(const json::Value &V, Location &L, std::string &SourceLine,
                 std::vector<ByteRange> &Ranges) {
  const json::Object *O = V.getAsObject();
  if (!O)
    return false;
  std::optional<int64_t> Offset = O->getInteger("offset");
  std::optional<StringRef> Line = O->getString("sourceLine");
  if (!Offset || !Line || !rangesFromJSON(*O, Ranges))
    return false;
  L.Offset = static_cast<unsigned>(*Offset);
  SourceLine = Line->str();
  return true;
}

json::Value findingToJSON(const Finding &F) {
  json::Value V = toJSON(F);
  addDetails(V, F.Loc, F.SourceLine, F.Ranges);
  V.getAsObject()->insert({"warningAsError", F.WarningAsError});
  json::Array *Notes = V.getAsObject()->getArray("notes");
  for (size_t I = 0; I < F.Notes.size(); ++I)
    addDetails((*Notes)[I], F.Notes[I].Loc, F.Notes[I].SourceLine,
               F.Notes[I].Ranges);
  return V;
}

bool findingFromJSON(const json::Value &V, Finding &F) {
  json::Path::Root Root;
  if (!fromJSON(V, F, Root) || !readDetails(V, F.Loc, F.SourceLine, F.Ranges))
    return false;
  const json::Object &O = *V.getAsObject();
  std::optional<bool> Promoted = O.getBoolean("warningAsError");
  const json::Array *Notes = O.getArray("notes");
  if (!Promoted || !Notes || Notes->size() != F.Notes.size())
    return false;
  F.WarningAsError = *Promoted;
  for (size_t I = 0; I < F.Notes.size(); ++I)
    if (!readDetails((*Notes)[I], F.Notes[I].Loc, F.Notes[I].SourceLine,
                     F.Notes[I].Ranges))
      return false;
  return true;
}

} // namespace

ResultCache::ResultCache(StringRef CacheDir, FileDigests &Digests)
    : Digests(Digests) {
  SmallString<256> Path(CacheDir);
  sys::path::append(Path, "results");
  Dir = std::string(Path);
}

std::string ResultCache::key(StringRef ToolId, StringRef File,
                             StringRef Commands, StringRef Config) {
  json::Array Parts{EntryVersion, ToolId, File, Commands, Config};
  return digestOf(formatv("{0}", json::Value(std::move(Parts))).str());
}

std::string ResultCache::pathOf(StringRef Key) const {
  return (Dir + "/" + Key + ".json").str();
}

std::optional<TUResult> ResultCache::lookup(StringRef Key) {
  auto Buffer = MemoryBuffer::getFile(pathOf(Key));
  if (!Buffer)
    return std::nullopt;
  Expected<json::Value> Parsed = json::parse((*Buffer)->getBuffer());
  if (!Parsed) {
    consumeError(Parsed.takeError());
    return std::nullopt;
  }
  const json::Object *Entry = Parsed->getAsObject();
  if (!Entry || Entry->getInteger("version") != EntryVersion)
    return std::nullopt;
  const json::Array *Dependencies = Entry->getArray("dependencies");
  const json::Array *Findings = Entry->getArray("findings");
  const json::Array *Checks = Entry->getArray("enabledChecks");
  std::optional<StringRef> File = Entry->getString("file");
  if (!Dependencies || !Findings || !Checks || !File)
    return std::nullopt;

  TUResult Result;
  Result.File = File->str();
  for (const json::Value &D : *Dependencies) {
    const json::Object *O = D.getAsObject();
    std::optional<StringRef> Path = O ? O->getString("file") : std::nullopt;
    std::optional<StringRef> Digest = O ? O->getString("digest") : std::nullopt;
    if (!Path || !Digest)
      return std::nullopt;
    std::optional<std::string> Now = Digests.get(*Path);
    if (!Now || *Now != *Digest)
      return std::nullopt;
    Result.Dependencies.push_back(Path->str());
  }
  // A TU with compiler errors: the headers it did not find must still be
  // missing, and its errors are reported again.
  if (const json::Array *Absent = Entry->getArray("absentIncludes"))
    for (const json::Value &A : *Absent) {
      std::optional<StringRef> Path = A.getAsString();
      if (!Path || sys::fs::exists(*Path))
        return std::nullopt;
      Result.AbsentIncludes.push_back(Path->str());
    }
  if (std::optional<StringRef> First = Entry->getString("firstCompileError")) {
    Result.CompileError = true;
    Result.FirstCompileError = First->str();
  }
  for (const json::Value &V : *Findings) {
    Finding F;
    if (!findingFromJSON(V, F))
      return std::nullopt;
    Result.Findings.push_back(std::move(F));
  }
  for (const json::Value &V : *Checks) {
    std::optional<StringRef> Check = V.getAsString();
    if (!Check)
      return std::nullopt;
    Result.EnabledChecks.push_back(Check->str());
  }
  if (const json::Object *Export = Entry->getObject("summaryExport"))
    Result.SummaryExport =
        formatv("{0}", json::Value(json::Object(*Export))).str();
  return Result;
}

void ResultCache::store(StringRef Key, const TUResult &Result) {
  if (!Result.ToolError.empty() || Result.Dependencies.empty())
    return;
  json::Array Dependencies;
  for (const std::string &Path : Result.Dependencies) {
    std::optional<std::string> Digest = Digests.get(Path);
    if (!Digest)
      return; // a file that vanished: the entry could never be trusted
    Dependencies.push_back(json::Object{{"file", Path}, {"digest", *Digest}});
  }
  json::Array Findings;
  for (const Finding &F : Result.Findings)
    Findings.push_back(findingToJSON(F));
  json::Object Entry{{"version", EntryVersion},
                     {"file", Result.File},
                     {"enabledChecks", json::Array(Result.EnabledChecks)},
                     {"findings", std::move(Findings)},
                     {"dependencies", std::move(Dependencies)}};
  if (!Result.AbsentIncludes.empty())
    Entry["absentIncludes"] = json::Array(Result.AbsentIncludes);
  if (Result.CompileError)
    Entry["firstCompileError"] = Result.FirstCompileError;
  if (!Result.SummaryExport.empty()) {
    Expected<json::Value> Export = json::parse(Result.SummaryExport);
    if (!Export) {
      consumeError(Export.takeError());
      return;
    }
    Entry["summaryExport"] = std::move(*Export);
  }
  if (sys::fs::create_directories(Dir))
    return; // the cache is an optimisation: a read-only one just misses
  // Atomic (a temporary file renamed), so that a concurrent run never reads
  // half an entry.
  consumeError(writeToOutput(pathOf(Key), [&](raw_ostream &OS) {
    OS << json::Value(std::move(Entry)) << '\n';
    return Error::success();
  }));
}

} // namespace torchtidy
