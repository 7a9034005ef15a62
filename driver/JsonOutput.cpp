//===--- JsonOutput.cpp - torch-tidy driver -------------------------------===//
//
// --format=json. The document is an object so that it can grow:
//
//   {
//     "version": 1,
//     "tool": {"name": "torch-tidy", "version": "0.1.0"},
//     "findings": [ <Finding>... ],        // sorted, see Finding.h
//     "toolErrors": [ {"file": ..., "message": ...}... ]
//   }
//
// Each finding is toJSON(Finding); docs/driver.md has the full schema.
// Keys are written in sorted order (llvm::json does that), so the bytes are
// stable.
//
//===----------------------------------------------------------------------===//

#include "OutputFormats.h"

#include "llvm/Support/FormatVariadic.h"

using namespace llvm;

namespace torchtidy {

json::Value toJSONDocument(const Report &R) {
  json::Array Findings;
  for (const Finding &F : R.Findings)
    Findings.push_back(toJSON(F));
  json::Array Errors;
  for (const ToolError &E : R.ToolErrors)
    Errors.push_back(json::Object{{"file", E.File}, {"message", E.Message}});
  return json::Object{
      {"version", FindingsJSONVersion},
      {"tool", json::Object{{"name", "torch-tidy"},
                            {"version", TORCH_TIDY_VERSION}}},
      {"findings", std::move(Findings)},
      {"toolErrors", std::move(Errors)}};
}

void printJSON(const Report &R, raw_ostream &OS) {
  OS << formatv("{0:2}", toJSONDocument(R)) << '\n';
}

} // namespace torchtidy
