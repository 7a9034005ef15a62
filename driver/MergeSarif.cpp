//===--- MergeSarif.cpp - torch-tidy driver -------------------------------===//
//
// The inverse of SarifOutput.cpp for what the Report needs, so that the
// merged file is printed by the same printSARIF as a single run's and is
// byte-identical to it: offsets that SARIF does not carry (of a location,
// of a fix's line) are 0 on both sides of every comparison.
//
//===----------------------------------------------------------------------===//

#include "Fingerprint.h"
#include "MergeSarif.h"

#include "Messages.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include <set>

using namespace llvm;

namespace torchtidy {
namespace {

Error fail(const Twine &Message) {
  return createStringError(inconvertibleErrorCode(), Message);
}

class Reader {
public:
  Reader(StringRef Path, StringRef Command) : Path(Path), Command(Command) {}

  Expected<Report> read(const json::Value &Document) {
    const json::Object *Doc = Document.getAsObject();
    const json::Array *Runs = Doc ? Doc->getArray("runs") : nullptr;
    if (!Runs || Runs->size() != 1 || !(*Runs)[0].getAsObject())
      return bad("has no single run");
    const json::Object &Run = *(*Runs)[0].getAsObject();
    const json::Object *Driver =
        Run.getObject("tool") ? Run.getObject("tool")->getObject("driver")
                              : nullptr;
    if (!Driver || Driver->getString("name") != "torch-tidy")
      return bad("was not written by torch-tidy");

    Report R;
    if (const json::Object *Bases = Run.getObject("originalUriBaseIds"))
      if (const json::Object *Root = Bases->getObject("SRCROOT"))
        if (std::optional<StringRef> URI = Root->getString("uri")) {
          StringRef Rest = *URI;
          if (!Rest.consume_front("file://"))
            return bad("has a SRCROOT that is not a file:// URI");
          Base = percentDecode(Rest);
          R.BaseDir = StringRef(Base).rtrim('/').str();
          if (R.BaseDir.empty())
            R.BaseDir = "/";
        }
    if (const json::Array *Rules = Driver->getArray("rules"))
      for (const json::Value &Rule : *Rules) {
        const json::Object *O = Rule.getAsObject();
        std::optional<StringRef> Id = O ? O->getString("id") : std::nullopt;
        if (!Id)
          return bad("has a rule without an id");
        R.Rules.push_back(Id->str());
      }
    if (const json::Array *Invocations = Run.getArray("invocations"))
      for (const json::Value &Inv : *Invocations)
        if (const json::Object *I = Inv.getAsObject())
          if (const json::Array *Notes =
                  I->getArray("toolExecutionNotifications"))
            for (const json::Value &N : *Notes) {
              ToolError E;
              if (!readNotification(N, E))
                return bad("has a malformed tool notification");
              R.ToolErrors.push_back(std::move(E));
            }
    if (const json::Array *Artifacts = Run.getArray("artifacts"))
      for (const json::Value &A : *Artifacts) {
        const json::Object *O = A.getAsObject();
        const json::Object *Hashes = O ? O->getObject("hashes") : nullptr;
        std::string File;
        if (!O || !readArtifact(O->getObject("location"), File))
          return bad("has a malformed artifact");
        if (std::optional<StringRef> Digest =
                Hashes ? Hashes->getString("sha-256") : std::nullopt)
          R.SourceDigests[File] = Digest->str();
      }
    const json::Array *Results = Run.getArray("results");
    if (!Results)
      return bad("has no results array");
    for (const json::Value &Result : *Results) {
      Finding F;
      if (!readResult(Result, F))
        return bad("has a malformed result");
      // A log written with --baseline: its results keep their state.
      std::optional<StringRef> State;
      if (const json::Object *O = Result.getAsObject())
        State = O->getString("baselineState");
      if (State)
        R.HasBaseline = true;
      if (State == "unchanged")
        R.Unchanged.push_back(std::move(F));
      else if (State == "absent")
        R.Absent.push_back(std::move(F));
      else if (!State || State == "new" || State == "updated")
        R.Findings.push_back(std::move(F));
      else
        return bad("has a result whose baselineState is '" + *State + "'");
    }
    return R;
  }

private:
  Error bad(const Twine &What) {
    return fail("'" + Path + "' " + What + "; " + Command +
                " reads the SARIF files of torch-tidy --format=sarif");
  }

  bool readArtifact(const json::Object *Artifact, std::string &File) {
    std::optional<StringRef> URI =
        Artifact ? Artifact->getString("uri") : std::nullopt;
    if (!URI)
      return false;
    if (Artifact->getString("uriBaseId")) {
      if (Base.empty())
        return false;
      File = Base + (StringRef(Base).ends_with("/") ? "" : "/") +
             percentDecode(*URI);
      return true;
    }
    StringRef Rest = *URI;
    if (!Rest.consume_front("file://"))
      return false;
    File = percentDecode(Rest);
    return true;
  }

  /// A physicalLocation; false when malformed.
  bool readLocation(const json::Object *Physical, Location &L) {
    if (!Physical ||
        !readArtifact(Physical->getObject("artifactLocation"), L.File))
      return false;
    if (const json::Object *Region = Physical->getObject("region")) {
      L.Line = Region->getInteger("startLine").value_or(0);
      L.Column = Region->getInteger("startColumn").value_or(0);
    }
    return true;
  }

  static bool readMessage(const json::Object &O, std::string &Text) {
    const json::Object *Message = O.getObject("message");
    std::optional<StringRef> T =
        Message ? Message->getString("text") : std::nullopt;
    if (!T)
      return false;
    Text = T->str();
    return true;
  }

  bool readNotification(const json::Value &V, ToolError &E) {
    const json::Object *O = V.getAsObject();
    if (!O || !readMessage(*O, E.Message))
      return false;
    if (const json::Array *Locations = O->getArray("locations"))
      if (!Locations->empty()) {
        const json::Object *L = (*Locations)[0].getAsObject();
        const json::Object *P = L ? L->getObject("physicalLocation") : nullptr;
        if (!P || !readArtifact(P->getObject("artifactLocation"), E.File))
          return false;
      }
    return true;
  }

  bool readResult(const json::Value &V, Finding &F) {
    const json::Object *O = V.getAsObject();
    std::optional<StringRef> Rule = O ? O->getString("ruleId") : std::nullopt;
    std::optional<StringRef> LevelText =
        O ? O->getString("level") : std::nullopt;
    if (!Rule || !LevelText ||
        (*LevelText != "warning" && *LevelText != "error") ||
        !readMessage(*O, F.Message))
      return false;
    F.Check = Rule->str();
    F.Severity = *LevelText == "error" ? Level::Error : Level::Warning;
    F.WarningAsError = F.Severity == Level::Error &&
                       !StringRef(F.Check).starts_with("clang-diagnostic-");
    if (const json::Object *Prints = O->getObject("partialFingerprints"))
      if (std::optional<StringRef> Print = Prints->getString(FingerprintKey))
        F.Fingerprint = Print->str();
    if (const json::Array *Locations = O->getArray("locations"))
      if (!Locations->empty()) {
        const json::Object *L = (*Locations)[0].getAsObject();
        if (!L || !readLocation(L->getObject("physicalLocation"), F.Loc))
          return false;
      }
    if (const json::Array *Related = O->getArray("relatedLocations"))
      for (const json::Value &RV : *Related) {
        const json::Object *RL = RV.getAsObject();
        Note N;
        if (!RL || !readMessage(*RL, N.Message))
          return false;
        if (const json::Object *P = RL->getObject("physicalLocation"))
          if (!readLocation(P, N.Loc))
            return false;
        F.Notes.push_back(std::move(N));
      }
    if (F.Notes.empty() && !readCodeFlows(*O, F))
      return false;
    if (const json::Array *Fixes = O->getArray("fixes"))
      for (const json::Value &FV : *Fixes) {
        const json::Object *Fix = FV.getAsObject();
        const json::Array *Changes =
            Fix ? Fix->getArray("artifactChanges") : nullptr;
        if (!Changes)
          return false;
        for (const json::Value &CV : *Changes)
          if (!readChange(CV, F))
            return false;
      }
    return true;
  }

  /// The steps of a `codeFlows` thread flow, as ordered notes (for a log
  /// that carries the chain of notes only there); the result's own location
  /// as a step is the warning, not a note.
  bool readCodeFlows(const json::Object &Result, Finding &F) {
    const json::Array *Flows = Result.getArray("codeFlows");
    if (!Flows)
      return true;
    for (const json::Value &Flow : *Flows) {
      const json::Object *FO = Flow.getAsObject();
      const json::Array *Threads = FO ? FO->getArray("threadFlows") : nullptr;
      if (!Threads)
        return false;
      for (const json::Value &Thread : *Threads) {
        const json::Object *TO = Thread.getAsObject();
        const json::Array *Steps = TO ? TO->getArray("locations") : nullptr;
        if (!Steps)
          return false;
        for (const json::Value &Step : *Steps) {
          const json::Object *SO = Step.getAsObject();
          const json::Object *L = SO ? SO->getObject("location") : nullptr;
          if (!L)
            return false;
          Note N;
          readMessage(*L, N.Message);
          if (const json::Object *P = L->getObject("physicalLocation"))
            if (!readLocation(P, N.Loc))
              return false;
          bool IsWarning = N.Loc.File == F.Loc.File &&
                           N.Loc.Line == F.Loc.Line &&
                           (N.Message.empty() || N.Message == F.Message);
          if (!IsWarning)
            F.Notes.push_back(std::move(N));
        }
      }
    }
    return true;
  }

  bool readChange(const json::Value &V, Finding &F) {
    const json::Object *Change = V.getAsObject();
    std::string File;
    const json::Array *Replacements =
        Change ? Change->getArray("replacements") : nullptr;
    if (!Replacements ||
        !readArtifact(Change->getObject("artifactLocation"), File))
      return false;
    for (const json::Value &RV : *Replacements) {
      const json::Object *R = RV.getAsObject();
      const json::Object *Deleted = R ? R->getObject("deletedRegion") : nullptr;
      const json::Object *Inserted =
          R ? R->getObject("insertedContent") : nullptr;
      std::optional<int64_t> Offset =
          Deleted ? Deleted->getInteger("byteOffset") : std::nullopt;
      std::optional<int64_t> Length =
          Deleted ? Deleted->getInteger("byteLength") : std::nullopt;
      std::optional<StringRef> Text =
          Inserted ? Inserted->getString("text") : std::nullopt;
      if (!Offset || !Length || !Text || *Offset < 0 || *Length < 0)
        return false;
      FixReplacement FR;
      FR.Loc.File = File;
      FR.Loc.Offset = unsigned(*Offset);
      FR.Length = unsigned(*Length);
      FR.Replacement = Text->str();
      F.Fixes.push_back(std::move(FR));
    }
    return true;
  }

  std::string Path;
  std::string Command;
  std::string Base; // %SRCROOT% as a path, with its trailing '/'
};

} // namespace

Expected<json::Value> readJSONFile(StringRef Path) {
  auto Buffer = MemoryBuffer::getFileOrSTDIN(Path);
  if (!Buffer)
    return fail("cannot read '" + Path + "': " + Buffer.getError().message());
  Expected<json::Value> Document = json::parse((*Buffer)->getBuffer());
  if (!Document)
    return fail("malformed JSON in '" + Path +
                "': " + toString(Document.takeError()));
  return Document;
}

Expected<Report> fromSARIFDocument(const json::Value &Document,
                                   StringRef Path, StringRef Command) {
  return Reader(Path, Command).read(Document);
}

Expected<Report> readSARIF(StringRef Path) {
  Expected<json::Value> Document = readJSONFile(Path);
  if (!Document)
    return Document.takeError();
  return fromSARIFDocument(*Document, Path, "merge-sarif");
}

Report mergeReports(ArrayRef<Report> Reports) {
  Report Merged;
  std::set<std::string> Rules;
  // A file whose digest differs between two reports changed in between:
  // it gets none, whatever the order of the reports.
  std::set<std::string> Changed;
  for (const Report &R : Reports)
    for (const auto &[File, Digest] : R.SourceDigests)
      if (!Merged.SourceDigests.emplace(File, Digest).second &&
          Merged.SourceDigests[File] != Digest)
        Changed.insert(File);
  for (const std::string &File : Changed)
    Merged.SourceDigests.erase(File);
  for (const Report &R : Reports) {
    if (Merged.BaseDir.empty())
      Merged.BaseDir = R.BaseDir;
    Rules.insert(R.Rules.begin(), R.Rules.end());
    Merged.Findings.insert(Merged.Findings.end(), R.Findings.begin(),
                           R.Findings.end());
    Merged.HasBaseline |= R.HasBaseline;
    Merged.Unchanged.insert(Merged.Unchanged.end(), R.Unchanged.begin(),
                            R.Unchanged.end());
    Merged.Absent.insert(Merged.Absent.end(), R.Absent.begin(),
                         R.Absent.end());
    Merged.ToolErrors.insert(Merged.ToolErrors.end(), R.ToolErrors.begin(),
                             R.ToolErrors.end());
  }
  sortAndUnique(Merged.Findings);
  sortAndUnique(Merged.Unchanged);
  sortAndUnique(Merged.Absent);
  Merged.Rules.assign(Rules.begin(), Rules.end());
  auto Key = [](const ToolError &E) { return std::tie(E.File, E.Message); };
  llvm::sort(Merged.ToolErrors, [&](const ToolError &A, const ToolError &B) {
    return Key(A) < Key(B);
  });
  Merged.ToolErrors.erase(
      std::unique(Merged.ToolErrors.begin(), Merged.ToolErrors.end(),
                  [&](const ToolError &A, const ToolError &B) {
                    return Key(A) == Key(B);
                  }),
      Merged.ToolErrors.end());
  return Merged;
}

int mergeSarifMain(ArrayRef<const char *> Args) {
  if (Args.size() == 1 &&
      (StringRef(Args[0]) == "--help" || StringRef(Args[0]) == "-h")) {
    outs() << "usage: torch-tidy merge-sarif OUT.sarif IN.sarif...\n\n"
              "Merges the SARIF files of `torch-tidy --shard=i/N "
              "--format=sarif` runs into\nthe file one run over all the "
              "translation units writes (OUT may be '-').\n";
    return 0;
  }
  if (Args.size() < 2) {
    printError("merge-sarif needs an output file and at least one input "
               "(torch-tidy merge-sarif OUT.sarif IN.sarif...)");
    return 2;
  }
  std::vector<Report> Reports;
  for (const char *Input : Args.drop_front()) {
    Expected<Report> R = readSARIF(Input);
    if (!R) {
      printError(toString(R.takeError()));
      return 2;
    }
    Reports.push_back(std::move(*R));
  }
  Report Merged = mergeReports(Reports);
  if (Error E = writeToOutput(Args[0], [&](raw_ostream &OS) {
        printSARIF(Merged, OS);
        return Error::success();
      })) {
    printError("cannot write '" + Twine(Args[0]) +
               "': " + toString(std::move(E)));
    return 2;
  }
  return 0;
}

} // namespace torchtidy
