//===--- Finding.h - torch-tidy driver --------------------------*- C++ -*-===//
//
// A plain, SourceManager-free record of one diagnostic, built from clang-tidy's
// ClangTidyError with line and column resolved. Every output format, the fix
// applier and (later) the audit cache work on these. The JSON form written by
// toJSON() is the contract read by the runtime verifier: see docs/driver.md.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_FINDING_H
#define TORCH_TIDY_DRIVER_FINDING_H

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace clang::tidy {
struct ClangTidyError;
} // namespace clang::tidy

namespace torchtidy {

/// A position in a file. Line and Column are 1-based (Column counts bytes, as
/// clang does); both are 0 for a diagnostic without a location.
struct Location {
  std::string File; // absolute, normalised; empty when there is no location
  unsigned Line = 0;
  unsigned Column = 0;
  unsigned Offset = 0; // byte offset in File
};

/// Source ranges highlighted with `~` in text output (byte offsets in the
/// file of the location they belong to). Not part of the JSON.
struct ByteRange {
  unsigned Offset = 0;
  unsigned Length = 0;
};

struct Note {
  Location Loc;
  std::string Message;
  std::string SourceLine; // text of the line at Loc, for text output only
  std::vector<ByteRange> Ranges;
};

/// One replacement of a fix-it: replace Length bytes at Offset in File.
struct FixReplacement {
  Location Loc; // File, Offset and the Line/Column of Offset
  unsigned Length = 0;
  std::string Replacement;
};

enum class Level { Warning, Error };

struct Finding {
  std::string Check;
  Level Severity = Level::Warning;
  bool WarningAsError = false; // a check warning promoted by warnings-as-errors
  Location Loc;
  std::string Message;
  std::string SourceLine; // text of the line at Loc, for text output only
  std::vector<ByteRange> Ranges;
  std::vector<Note> Notes;
  std::vector<FixReplacement> Fixes;
  /// An unsafe fix-it (it changes what the program computes): a check
  /// attaches it to a note, as clang-tidy expects, which applies note
  /// fix-its only with --fix-notes. The one note's fix-it when the warning
  /// has none of its own and exactly one note has one (two are
  /// alternatives, not one fix). --fix-unsafe applies it.
  std::vector<FixReplacement> UnsafeFixes;
  /// Stable across unrelated edits (Fingerprint.h); "" until computed.
  std::string Fingerprint;

  bool isCompilerError() const {
    return Severity == Level::Error && !WarningAsError;
  }
};

/// Total order used for all output: file, line, column, check, message, then
/// notes and fixes (so that equal-looking findings still sort stably).
bool operator<(const Finding &A, const Finding &B);
bool operator==(const Finding &A, const Finding &B);

/// Sorts and removes exact duplicates (a header finding seen from two TUs).
void sortAndUnique(std::vector<Finding> &Findings);
/// Sorts, and keeps one finding per location, check and message: the first
/// in sorted order (two TUs reach a header's finding through different
/// calls, and their notes differ).
void onePerLocation(std::vector<Finding> &Findings);

/// Reads files on demand and maps byte offsets to lines and columns.
class SourceCache {
public:
  /// Fills Line/Column of \p Loc from Loc.File and Loc.Offset, and returns the
  /// text of that line ("" when the file cannot be read).
  std::string resolve(Location &Loc);

  /// The text of \p File, or std::nullopt when it cannot be read.
  std::optional<llvm::StringRef> contents(llvm::StringRef File);
  /// The number of lines of \p File (0 when it cannot be read).
  unsigned lineCount(llvm::StringRef File);
  /// The byte offset where line \p Line (1-based, <= lineCount) starts, and
  /// the line's text without its end of line.
  unsigned lineStart(llvm::StringRef File, unsigned Line);
  llvm::StringRef lineText(llvm::StringRef File, unsigned Line);

private:
  struct Entry {
    std::unique_ptr<llvm::MemoryBuffer> Buffer;
    std::vector<unsigned> LineStarts;
  };
  const Entry *get(llvm::StringRef File);
  llvm::StringMap<Entry> Files;
};

/// Converts one clang-tidy diagnostic. Relative paths are made absolute
/// against the diagnostic's build directory.
Finding toFinding(const clang::tidy::ClangTidyError &Error,
                  SourceCache &Sources);

/// Makes \p Path absolute (against \p Base, or the current directory when
/// Base is empty), removes "." and ".." components and uses native separators.
std::string normalizePath(llvm::StringRef Path, llvm::StringRef Base = "");

llvm::StringRef levelName(Level L);

// JSON. The schema is documented in docs/driver.md; bump FindingsJSONVersion
// on any incompatible change.
constexpr int FindingsJSONVersion = 1;
llvm::json::Value toJSON(const Location &L);
llvm::json::Value toJSON(const Note &N);
llvm::json::Value toJSON(const FixReplacement &R);
llvm::json::Value toJSON(const Finding &F);
bool fromJSON(const llvm::json::Value &V, Note &N, llvm::json::Path P);
bool fromJSON(const llvm::json::Value &V, FixReplacement &R,
              llvm::json::Path P);
bool fromJSON(const llvm::json::Value &V, Finding &F, llvm::json::Path P);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_FINDING_H
