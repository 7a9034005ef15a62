//===--- JsonOutput.cpp - torch-tidy driver -------------------------------===//
//
// --format=json. The document is an object so that it can grow:
//
//   {
//     "version": 1,
//     "tool": {"name": "torch-tidy", "version": "0.1.0"},
//     "findings": [ <Finding>... ],        // sorted, see Finding.h
//     "toolErrors": [ {"file": ..., "message": ...}... ],
//     "files": { "<path>": {"sha256": "<hex>"}... }   // Report::SourceDigests
//   }
//
// Each finding is toJSON(Finding); docs/driver.md has the full schema.
// Keys are written in sorted order (llvm::json does that), so the bytes are
// stable.
//
//===----------------------------------------------------------------------===//

#include "OutputFormats.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SHA256.h"

using namespace llvm;

namespace torchtidy {

std::string sha256Hex(StringRef Data) {
  return toHex(SHA256::hash(arrayRefFromStringRef(Data)), /*LowerCase=*/true);
}

void addSourceDigests(Report &R) {
  auto Add = [&](const std::string &File) {
    if (File.empty() || R.SourceDigests.count(File))
      return;
    auto Buffer = MemoryBuffer::getFile(File, /*IsText=*/false,
                                        /*RequiresNullTerminator=*/false);
    if (Buffer)
      R.SourceDigests[File] = sha256Hex((*Buffer)->getBuffer());
  };
  for (const Finding &F : R.Findings) {
    Add(F.Loc.File);
    for (const Note &N : F.Notes)
      Add(N.Loc.File);
    for (const FixReplacement &Fix : F.Fixes)
      Add(Fix.Loc.File);
  }
}

json::Value toJSONDocument(const Report &R) {
  json::Array Findings;
  for (const Finding &F : R.Findings)
    Findings.push_back(toJSON(F));
  json::Array Errors;
  for (const ToolError &E : R.ToolErrors)
    Errors.push_back(json::Object{{"file", E.File}, {"message", E.Message}});
  json::Object Files;
  for (const auto &[File, Digest] : R.SourceDigests)
    Files[File] = json::Object{{"sha256", Digest}};
  return json::Object{
      {"version", FindingsJSONVersion},
      {"tool", json::Object{{"name", "torch-tidy"},
                            {"version", TORCH_TIDY_VERSION}}},
      {"findings", std::move(Findings)},
      {"toolErrors", std::move(Errors)},
      {"files", std::move(Files)}};
}

Expected<Report> fromJSONDocument(const json::Value &Document,
                                  StringRef Path) {
  auto Bad = [&](const Twine &What) -> Error {
    return createStringError(inconvertibleErrorCode(),
                             "'" + Path + "' " + What);
  };
  const json::Object *Doc = Document.getAsObject();
  if (!Doc || !Doc->getInteger("version") || !Doc->getArray("findings"))
    return Bad("is not a torch-tidy --format=json document");
  if (*Doc->getInteger("version") != FindingsJSONVersion)
    return Bad(formatv("has version {0}; this torch-tidy reads version {1}",
                       *Doc->getInteger("version"), FindingsJSONVersion));
  Report R;
  json::Path::Root Root;
  if (!fromJSON(*Doc->get("findings"), R.Findings,
                json::Path(Root).field("findings")))
    return Bad("has a malformed finding: " + toString(Root.getError()));
  if (const json::Array *Errors = Doc->getArray("toolErrors"))
    for (const json::Value &V : *Errors) {
      const json::Object *O = V.getAsObject();
      std::optional<StringRef> File = O ? O->getString("file") : std::nullopt;
      std::optional<StringRef> Message =
          O ? O->getString("message") : std::nullopt;
      if (!File || !Message)
        return Bad("has a malformed tool error");
      R.ToolErrors.push_back({File->str(), Message->str()});
    }
  if (const json::Object *Files = Doc->getObject("files"))
    for (const auto &[File, V] : *Files)
      if (const json::Object *O = V.getAsObject())
        if (std::optional<StringRef> Digest = O->getString("sha256"))
          R.SourceDigests[File.str()] = Digest->str();
  return R;
}

void printJSON(const Report &R, raw_ostream &OS) {
  OS << formatv("{0:2}", toJSONDocument(R)) << '\n';
}

} // namespace torchtidy
