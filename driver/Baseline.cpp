//===--- Baseline.cpp - torch-tidy driver ---------------------------------===//

#include "Baseline.h"
#include "Fingerprint.h"
#include "MergeSarif.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace torchtidy {

static Error bad(StringRef Path, const Twine &What) {
  return createStringError(inconvertibleErrorCode(),
                           "baseline '" + Path + "' " + What);
}

Expected<Baseline> loadBaseline(StringRef Path) {
  auto Buffer = MemoryBuffer::getFile(Path, /*IsText=*/true);
  if (!Buffer)
    return bad(Path, "cannot be read: " + Buffer.getError().message());
  Expected<json::Value> Document = json::parse((*Buffer)->getBuffer());
  if (!Document)
    return bad(Path, "is not JSON: " + toString(Document.takeError()));
  const json::Object *O = Document->getAsObject();
  bool IsSarif = O && O->get("runs");
  Expected<Report> R = IsSarif ? fromSARIFDocument(*Document, Path, "--baseline")
                               : fromJSONDocument(*Document, Path);
  if (!R && IsSarif)
    return R.takeError(); // names the file and what is wrong
  if (!R)
    return bad(Path, "is neither a SARIF log nor a torch-tidy JSON report (" +
                         toString(R.takeError()) + ")");
  // A log written against an earlier baseline: its new and unchanged
  // results are what it saw; its absent ones were gone already.
  Baseline B;
  for (std::vector<Finding> *Seen : {&R->Findings, &R->Unchanged})
    for (Finding &F : *Seen) {
      if (F.Fingerprint.empty())
        return bad(Path, formatv("has a finding without a '{0}' fingerprint "
                                 "(written by an older torch-tidy?)",
                                 FingerprintKey));
      B.Fingerprints.insert(F.Fingerprint);
      B.Findings.push_back(std::move(F));
    }
  return B;
}

void applyBaseline(Report &R, const Baseline &B) {
  R.HasBaseline = true;
  StringSet<> Current;
  std::vector<Finding> New;
  for (Finding &F : R.Findings) {
    Current.insert(F.Fingerprint);
    (B.Fingerprints.contains(F.Fingerprint) ? R.Unchanged : New)
        .push_back(std::move(F));
  }
  R.Findings = std::move(New);
  for (const Finding &F : B.Findings)
    if (!Current.contains(F.Fingerprint))
      R.Absent.push_back(F);
}

Error writeBaseline(const Report &R, StringRef Path) {
  std::string Temporary = (Path + ".tmp").str();
  {
    std::error_code EC;
    raw_fd_ostream OS(Temporary, EC, sys::fs::OF_Text);
    if (EC)
      return bad(Path, "cannot be written: " + EC.message());
    printJSON(R, OS);
    OS.close();
    if (OS.has_error()) {
      OS.clear_error();
      sys::fs::remove(Temporary);
      return bad(Path, "cannot be written");
    }
  }
  if (std::error_code EC = sys::fs::rename(Temporary, Path)) {
    sys::fs::remove(Temporary);
    return bad(Path, "cannot be written: " + EC.message());
  }
  return Error::success();
}

} // namespace torchtidy
