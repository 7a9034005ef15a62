//===--- OutputFormats.h - torch-tidy driver --------------------*- C++ -*-===//
//
// Printers for --format=text|json|sarif. Each one is a pure function of a
// Report, so the bytes written depend only on the sorted findings.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_OUTPUTFORMATS_H
#define TORCH_TIDY_DRIVER_OUTPUTFORMATS_H

#include "Finding.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"
#include <map>
#include <string>
#include <vector>

namespace torchtidy {

/// A file that could not be analysed (or not wholly), with why.
struct ToolError {
  std::string File; // may be empty
  std::string Message;
};

struct Report {
  std::vector<Finding> Findings; // sorted and unique
  /// Checks that ran: registered and enabled for at least one TU, sorted.
  std::vector<std::string> Rules;
  std::vector<ToolError> ToolErrors;
  /// Directory that SARIF URIs are made relative to (%SRCROOT%).
  std::string BaseDir;
  /// SHA-256 (hex) of each file that a finding, note or fix points into, as
  /// the file was when the findings were printed, so that a report made
  /// later can tell whether the source changed since.
  std::map<std::string, std::string> SourceDigests;
  /// With --baseline: Findings are the new ones; Unchanged the baseline
  /// also holds, Absent the baseline's that are gone (SARIF reports both).
  bool HasBaseline = false;
  std::vector<Finding> Unchanged, Absent;
};

/// Fills R.SourceDigests (files that cannot be read get none).
void addSourceDigests(Report &R);
/// The SHA-256 of \p Data in lower-case hex, as in SourceDigests.
std::string sha256Hex(llvm::StringRef Data);

/// Base of every check's documentation page, `<base><check>.md`.
inline constexpr const char *DocsBaseURL =
    "https://github.com/torch-tidy/torch-tidy/blob/main/docs/checks/";
inline constexpr const char *ProjectURL =
    "https://github.com/torch-tidy/torch-tidy";

/// \p Path with every byte but letters, digits and `/-._~` as %XX (URIs,
/// URL fragments).
std::string percentEncode(llvm::StringRef Path);
/// The inverse: every %XX as its byte (a malformed one is kept as text).
std::string percentDecode(llvm::StringRef Text);

/// The one-line description of a check (from checks/CheckDescriptions.h).
std::string describeCheck(llvm::StringRef Check);

void printText(const Report &R, llvm::raw_ostream &OS);
void printJSON(const Report &R, llvm::raw_ostream &OS);
void printSARIF(const Report &R, llvm::raw_ostream &OS);

/// The JSON document of --format=json (see docs/driver.md).
llvm::json::Value toJSONDocument(const Report &R);
/// Reads such a document back (\p Path names it in errors).
llvm::Expected<Report> fromJSONDocument(const llvm::json::Value &Document,
                                        llvm::StringRef Path);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_OUTPUTFORMATS_H
