//===--- SarifOutput.cpp - torch-tidy driver ------------------------------===//
//
// --format=sarif: SARIF 2.1.0, one run.
//  - tool.driver.rules: the checks that ran (registered and enabled), each
//    with a shortDescription and a helpUri to docs/checks/<check>.md.
//  - results: ruleId (+ ruleIndex when the rule is listed; compiler errors,
//    clang-diagnostic-*, have no rule), level, message, one physicalLocation;
//    notes become relatedLocations (and, when they cross into another file,
//    a codeFlow too), fix-its become fixes.
//  - files under BaseDir get URIs relative to the %SRCROOT% base id, others
//    absolute file:// URIs. Regions use clang's 1-based line and (byte) column.
//  - invocations[0] says whether every file was analysed, with a
//    toolExecutionNotification per tool error.
//  - partialFingerprints["torchTidy/v1"]: the finding's fingerprint
//    (Fingerprint.h); with --baseline, baselineState new / unchanged /
//    absent.
//  - artifacts: the files the results point into, with the SHA-256 of their
//    content (Report::SourceDigests).
//
//===----------------------------------------------------------------------===//

#include "Fingerprint.h"
#include "OutputFormats.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include <map>

using namespace llvm;

namespace torchtidy {
namespace {

constexpr const char *SarifSchema =
    "https://json.schemastore.org/sarif-2.1.0.json";
constexpr const char *BaseId = "SRCROOT";

} // namespace

std::string percentEncode(StringRef Path) {
  std::string Out;
  for (unsigned char C : Path) {
    if (isAlnum(C) || C == '/' || C == '-' || C == '.' || C == '_' ||
        C == '~') {
      Out += C;
    } else {
      Out += '%';
      Out += hexdigit(C >> 4, /*LowerCase=*/false);
      Out += hexdigit(C & 15, /*LowerCase=*/false);
    }
  }
  return Out;
}

std::string percentDecode(StringRef Text) {
  std::string Out;
  for (size_t I = 0; I < Text.size(); ++I) {
    unsigned Byte;
    if (Text[I] == '%' && I + 2 < Text.size() &&
        !Text.substr(I + 1, 2).getAsInteger(16, Byte)) {
      Out += char(Byte);
      I += 2;
    } else {
      Out += Text[I];
    }
  }
  return Out;
}

namespace {

std::string fileURI(StringRef AbsPath) {
  std::string Posix = sys::path::convert_to_slash(AbsPath);
  if (!StringRef(Posix).starts_with("/"))
    Posix = "/" + Posix; // C:/x -> /C:/x
  return "file://" + percentEncode(Posix);
}

/// "torch-empty-cache-in-loop" -> "EmptyCacheInLoop" (SARIF's rule `name`).
std::string friendlyName(StringRef Check) {
  Check.consume_front("torch-");
  std::string Name;
  bool Upper = true;
  for (char C : Check) {
    if (!isAlnum(C)) {
      Upper = true;
      continue;
    }
    Name += Upper ? toUpper(C) : C;
    Upper = false;
  }
  return Name;
}

class SarifWriter {
public:
  explicit SarifWriter(const Report &R) : R(R) {
    for (size_t I = 0; I < R.Rules.size(); ++I)
      RuleIndex[R.Rules[I]] = I;
    if (!R.BaseDir.empty()) {
      Base = sys::path::convert_to_slash(R.BaseDir);
      if (!StringRef(Base).ends_with("/"))
        Base += '/';
    }
  }

  json::Value document() {
    json::Array Results;
    // With a baseline: the new results, then those it also holds, then its
    // results that are gone, each with its baselineState.
    for (const auto &[Findings, State] :
         {std::pair(&R.Findings, "new"), std::pair(&R.Unchanged, "unchanged"),
          std::pair(&R.Absent, "absent")})
      for (const Finding &F : *Findings) {
        json::Object Res = result(F);
        if (R.HasBaseline)
          Res["baselineState"] = State;
        Results.push_back(std::move(Res));
      }
    json::Object Run{
        {"tool", json::Object{{"driver", driver()}}},
        {"invocations", json::Array{invocation()}},
        {"results", std::move(Results)},
    };
    if (!Base.empty())
      Run["originalUriBaseIds"] = json::Object{
          {BaseId, json::Object{{"uri", fileURI(Base)}}}};
    json::Array Artifacts;
    for (const auto &[File, Digest] : R.SourceDigests)
      Artifacts.push_back(
          json::Object{{"location", artifact(File)},
                       {"hashes", json::Object{{"sha-256", Digest}}}});
    if (!Artifacts.empty())
      Run["artifacts"] = std::move(Artifacts);
    return json::Object{{"$schema", SarifSchema},
                        {"version", "2.1.0"},
                        {"runs", json::Array{std::move(Run)}}};
  }

private:
  json::Object driver() {
    json::Array Rules;
    for (const std::string &Check : R.Rules) {
      std::string Description = describeCheck(Check);
      if (Description.empty())
        Description = "clang-tidy check " + Check + ".";
      json::Object Rule{{"id", Check},
                        {"name", friendlyName(Check)},
                        {"shortDescription",
                         json::Object{{"text", Description}}},
                        {"defaultConfiguration",
                         json::Object{{"level", "warning"}}}};
      if (StringRef(Check).starts_with("torch-"))
        Rule["helpUri"] = std::string(DocsBaseURL) + Check + ".md";
      Rules.push_back(std::move(Rule));
    }
    return json::Object{{"name", "torch-tidy"},
                        {"version", TORCH_TIDY_VERSION},
                        {"semanticVersion", TORCH_TIDY_VERSION},
                        {"informationUri", ProjectURL},
                        {"rules", std::move(Rules)}};
  }

  json::Object invocation() {
    json::Array Notifications;
    for (const ToolError &E : R.ToolErrors) {
      json::Object N{{"level", "error"},
                     {"message", json::Object{{"text", E.Message}}}};
      if (!E.File.empty())
        N["locations"] = json::Array{json::Object{
            {"physicalLocation",
             json::Object{{"artifactLocation", artifact(E.File)}}}}};
      Notifications.push_back(std::move(N));
    }
    json::Object Inv{{"executionSuccessful", R.ToolErrors.empty()}};
    if (!Notifications.empty())
      Inv["toolExecutionNotifications"] = std::move(Notifications);
    return Inv;
  }

  json::Object artifact(StringRef File) {
    std::string Posix = sys::path::convert_to_slash(File);
    if (!Base.empty() && StringRef(Posix).starts_with(Base))
      return json::Object{
          {"uri", percentEncode(StringRef(Posix).drop_front(Base.size()))},
          {"uriBaseId", BaseId}};
    return json::Object{{"uri", fileURI(File)}};
  }

  json::Object physical(const Location &L) {
    json::Object P{{"artifactLocation", artifact(L.File)}};
    if (L.Line > 0)
      P["region"] = json::Object{{"startLine", L.Line},
                                 {"startColumn", std::max(1u, L.Column)}};
    return P;
  }

  json::Object result(const Finding &F) {
    json::Object Res{{"ruleId", F.Check},
                     {"level", levelName(F.Severity)},
                     {"message", json::Object{{"text", F.Message}}}};
    auto It = RuleIndex.find(F.Check);
    if (It != RuleIndex.end())
      Res["ruleIndex"] = It->second;
    if (!F.Loc.File.empty())
      Res["locations"] =
          json::Array{json::Object{{"physicalLocation", physical(F.Loc)}}};
    json::Array Related;
    for (size_t I = 0; I < F.Notes.size(); ++I) {
      const Note &N = F.Notes[I];
      json::Object RL{{"id", static_cast<int64_t>(I)},
                      {"message", json::Object{{"text", N.Message}}}};
      if (!N.Loc.File.empty())
        RL["physicalLocation"] = physical(N.Loc);
      Related.push_back(std::move(RL));
    }
    if (!Related.empty())
      Res["relatedLocations"] = std::move(Related);
    // A finding whose notes cross into another file walks a path (a fact
    // returned by a helper, a requirement of a callee): the warning, then
    // its notes in order, as one thread flow.
    if (llvm::any_of(F.Notes,
                     [&](const Note &N) { return N.Loc.File != F.Loc.File; }) &&
        !F.Loc.File.empty()) {
      json::Array Steps;
      Steps.push_back(json::Object{
          {"location", json::Object{{"physicalLocation", physical(F.Loc)},
                                    {"message",
                                     json::Object{{"text", F.Message}}}}}});
      for (const Note &N : F.Notes) {
        if (N.Loc.File.empty())
          continue;
        Steps.push_back(json::Object{
            {"location",
             json::Object{{"physicalLocation", physical(N.Loc)},
                          {"message", json::Object{{"text", N.Message}}}}}});
      }
      Res["codeFlows"] = json::Array{json::Object{
          {"threadFlows",
           json::Array{json::Object{{"locations", std::move(Steps)}}}}}};
    }
    if (!F.Fixes.empty())
      Res["fixes"] = json::Array{fix(F)};
    if (!F.Fingerprint.empty())
      Res["partialFingerprints"] =
          json::Object{{FingerprintKey, F.Fingerprint}};
    return Res;
  }

  json::Object fix(const Finding &F) {
    // One artifactChange per file, replacements in offset order (the fixes
    // are sorted by file and offset already).
    json::Array Changes;
    size_t I = 0;
    while (I < F.Fixes.size()) {
      const std::string &File = F.Fixes[I].Loc.File;
      json::Array Replacements;
      for (; I < F.Fixes.size() && F.Fixes[I].Loc.File == File; ++I) {
        const FixReplacement &FR = F.Fixes[I];
        Replacements.push_back(json::Object{
            {"deletedRegion", json::Object{{"byteOffset", FR.Loc.Offset},
                                           {"byteLength", FR.Length}}},
            {"insertedContent", json::Object{{"text", FR.Replacement}}}});
      }
      Changes.push_back(json::Object{{"artifactLocation", artifact(File)},
                                     {"replacements", std::move(Replacements)}});
    }
    return json::Object{
        {"description", json::Object{{"text", "Apply the fix-it of " +
                                                  F.Check + "."}}},
        {"artifactChanges", std::move(Changes)}};
  }

  const Report &R;
  std::string Base;
  std::map<std::string, size_t> RuleIndex;
};

} // namespace

void printSARIF(const Report &R, raw_ostream &OS) {
  OS << formatv("{0:2}", SarifWriter(R).document()) << '\n';
}

} // namespace torchtidy
