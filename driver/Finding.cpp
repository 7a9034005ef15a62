//===--- Finding.cpp - torch-tidy driver ----------------------------------===//

#include "Finding.h"

#include "clang-tidy/ClangTidyDiagnosticConsumer.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include <algorithm>
#include <tuple>

using namespace llvm;

namespace torchtidy {

std::string normalizePath(StringRef Path, StringRef Base) {
  if (Path.empty())
    return "";
  SmallString<256> Abs(Path);
  if (!sys::path::is_absolute(Abs)) {
    if (!Base.empty()) {
      SmallString<256> Joined(Base);
      sys::path::append(Joined, Path);
      Abs = Joined;
    }
    sys::fs::make_absolute(Abs); // no-op when already absolute
  }
  sys::path::remove_dots(Abs, /*remove_dot_dot=*/true);
  sys::path::native(Abs);
  return std::string(Abs);
}

StringRef levelName(Level L) {
  return L == Level::Error ? "error" : "warning";
}

//===----------------------------------------------------------------------===//
// Ordering
//===----------------------------------------------------------------------===//

static auto key(const Location &L) {
  return std::tie(L.File, L.Line, L.Column, L.Offset);
}
static auto key(const Note &N) {
  return std::tuple_cat(key(N.Loc), std::tie(N.Message));
}
static auto key(const FixReplacement &R) {
  return std::tuple_cat(key(R.Loc), std::tie(R.Length, R.Replacement));
}

template <typename T>
static bool lessSeq(const std::vector<T> &A, const std::vector<T> &B) {
  return std::lexicographical_compare(
      A.begin(), A.end(), B.begin(), B.end(),
      [](const T &X, const T &Y) { return key(X) < key(Y); });
}
template <typename T>
static bool equalSeq(const std::vector<T> &A, const std::vector<T> &B) {
  return A.size() == B.size() &&
         std::equal(A.begin(), A.end(), B.begin(),
                    [](const T &X, const T &Y) { return key(X) == key(Y); });
}

bool operator<(const Finding &A, const Finding &B) {
  auto KA = std::tuple_cat(key(A.Loc), std::tie(A.Check, A.Message));
  auto KB = std::tuple_cat(key(B.Loc), std::tie(B.Check, B.Message));
  if (KA != KB)
    return KA < KB;
  if (A.Severity != B.Severity)
    return A.Severity < B.Severity;
  if (!equalSeq(A.Notes, B.Notes))
    return lessSeq(A.Notes, B.Notes);
  return lessSeq(A.Fixes, B.Fixes);
}

bool operator==(const Finding &A, const Finding &B) {
  return key(A.Loc) == key(B.Loc) && A.Check == B.Check &&
         A.Message == B.Message && A.Severity == B.Severity &&
         A.WarningAsError == B.WarningAsError && equalSeq(A.Notes, B.Notes) &&
         equalSeq(A.Fixes, B.Fixes);
}

void sortAndUnique(std::vector<Finding> &Findings) {
  std::stable_sort(Findings.begin(), Findings.end());
  Findings.erase(std::unique(Findings.begin(), Findings.end()),
                 Findings.end());
}

void onePerLocation(std::vector<Finding> &Findings) {
  sortAndUnique(Findings);
  Findings.erase(std::unique(Findings.begin(), Findings.end(),
                             [](const Finding &A, const Finding &B) {
                               return key(A.Loc) == key(B.Loc) &&
                                      A.Check == B.Check &&
                                      A.Message == B.Message &&
                                      A.Severity == B.Severity;
                             }),
                 Findings.end());
}

//===----------------------------------------------------------------------===//
// SourceCache
//===----------------------------------------------------------------------===//

/// The line of \p Text that starts at \p Start, without its end of line.
static StringRef lineFrom(StringRef Text, unsigned Start) {
  return Text.substr(Start).take_until(
      [](char C) { return C == '\n' || C == '\r'; });
}

const SourceCache::Entry *SourceCache::get(StringRef File) {
  auto It = Files.find(File);
  if (It != Files.end())
    return It->second.Buffer ? &It->second : nullptr;
  Entry &E = Files[File];
  auto BufOrErr = MemoryBuffer::getFile(File, /*IsText=*/false,
                                        /*RequiresNullTerminator=*/false);
  if (!BufOrErr)
    return nullptr;
  E.Buffer = std::move(*BufOrErr);
  StringRef Text = E.Buffer->getBuffer();
  E.LineStarts.push_back(0);
  for (size_t I = 0; I < Text.size(); ++I)
    if (Text[I] == '\n')
      E.LineStarts.push_back(I + 1);
  return &E;
}

std::string SourceCache::resolve(Location &Loc) {
  if (Loc.File.empty())
    return "";
  const Entry *E = get(Loc.File);
  if (!E)
    return "";
  StringRef Text = E->Buffer->getBuffer();
  unsigned Offset = std::min<unsigned>(Loc.Offset, Text.size());
  // The last line start that is <= Offset.
  auto It = std::upper_bound(E->LineStarts.begin(), E->LineStarts.end(),
                             Offset);
  unsigned LineIdx = It - E->LineStarts.begin() - 1;
  unsigned Start = E->LineStarts[LineIdx];
  Loc.Line = LineIdx + 1;
  Loc.Column = Offset - Start + 1;
  return lineFrom(Text, Start).str();
}

std::optional<StringRef> SourceCache::contents(StringRef File) {
  if (const Entry *E = get(File))
    return E->Buffer->getBuffer();
  return std::nullopt;
}

unsigned SourceCache::lineCount(StringRef File) {
  const Entry *E = get(File);
  if (!E)
    return 0;
  // A final line break ends the last line; it does not start another.
  bool EndsWithBreak = E->LineStarts.back() == E->Buffer->getBufferSize();
  return E->LineStarts.size() - EndsWithBreak;
}

unsigned SourceCache::lineStart(StringRef File, unsigned Line) {
  assert(Line >= 1 && Line <= lineCount(File));
  return get(File)->LineStarts[Line - 1];
}

StringRef SourceCache::lineText(StringRef File, unsigned Line) {
  StringRef Text = *contents(File);
  return lineFrom(Text, lineStart(File, Line));
}

//===----------------------------------------------------------------------===//
// ClangTidyError -> Finding
//===----------------------------------------------------------------------===//

static std::vector<ByteRange>
rangesIn(const clang::tooling::DiagnosticMessage &M, const std::string &File,
         StringRef BuildDir) {
  std::vector<ByteRange> Out;
  for (const clang::tooling::FileByteRange &R : M.Ranges)
    if (normalizePath(R.FilePath, BuildDir) == File)
      Out.push_back({R.FileOffset, R.Length});
  return Out;
}

/// A diagnostic's fix-it, sorted (Fix is a StringMap: its order is not
/// deterministic).
static std::vector<FixReplacement>
replacements(const llvm::StringMap<clang::tooling::Replacements> &Fix,
             StringRef BuildDir, SourceCache &Sources) {
  std::vector<FixReplacement> Out;
  for (const auto &FileAndReplacements : Fix) {
    for (const clang::tooling::Replacement &R : FileAndReplacements.second) {
      FixReplacement FR;
      FR.Loc.File = normalizePath(R.getFilePath(), BuildDir);
      FR.Loc.Offset = R.getOffset();
      FR.Length = R.getLength();
      FR.Replacement = R.getReplacementText().str();
      Sources.resolve(FR.Loc);
      Out.push_back(std::move(FR));
    }
  }
  llvm::sort(Out, [](const FixReplacement &A, const FixReplacement &B) {
    return key(A) < key(B);
  });
  return Out;
}

Finding toFinding(const clang::tidy::ClangTidyError &Error,
                  SourceCache &Sources) {
  Finding F;
  F.Check = Error.DiagnosticName;
  F.WarningAsError = Error.IsWarningAsError;
  F.Severity =
      (Error.DiagLevel == clang::tooling::Diagnostic::Error || F.WarningAsError)
          ? Level::Error
          : Level::Warning;
  F.Message = Error.Message.Message;
  F.Loc.File = normalizePath(Error.Message.FilePath, Error.BuildDirectory);
  F.Loc.Offset = Error.Message.FileOffset;
  F.SourceLine = Sources.resolve(F.Loc);
  F.Ranges = rangesIn(Error.Message, F.Loc.File, Error.BuildDirectory);

  for (const clang::tooling::DiagnosticMessage &M : Error.Notes) {
    Note N;
    N.Message = M.Message;
    N.Loc.File = normalizePath(M.FilePath, Error.BuildDirectory);
    N.Loc.Offset = M.FileOffset;
    N.SourceLine = Sources.resolve(N.Loc);
    N.Ranges = rangesIn(M, N.Loc.File, Error.BuildDirectory);
    F.Notes.push_back(std::move(N));
  }

  F.Fixes = replacements(Error.Message.Fix, Error.BuildDirectory, Sources);
  if (F.Fixes.empty()) {
    const clang::tooling::DiagnosticMessage *WithFix = nullptr;
    unsigned NotesWithFix = 0;
    for (const clang::tooling::DiagnosticMessage &M : Error.Notes)
      if (!M.Fix.empty()) {
        WithFix = &M;
        ++NotesWithFix;
      }
    if (NotesWithFix == 1)
      F.UnsafeFixes =
          replacements(WithFix->Fix, Error.BuildDirectory, Sources);
  }
  return F;
}

//===----------------------------------------------------------------------===//
// JSON
//===----------------------------------------------------------------------===//

json::Value toJSON(const Location &L) {
  return json::Object{{"file", L.File}, {"line", L.Line}, {"column", L.Column}};
}

json::Value toJSON(const Note &N) {
  return json::Object{{"file", N.Loc.File},
                      {"line", N.Loc.Line},
                      {"column", N.Loc.Column},
                      {"message", N.Message}};
}

json::Value toJSON(const FixReplacement &R) {
  return json::Object{{"file", R.Loc.File},
                      {"offset", R.Loc.Offset},
                      {"length", R.Length},
                      {"replacement", R.Replacement},
                      {"line", R.Loc.Line},
                      {"column", R.Loc.Column}};
}

json::Value toJSON(const Finding &F) {
  json::Array Notes, Fixes;
  for (const Note &N : F.Notes)
    Notes.push_back(toJSON(N));
  for (const FixReplacement &R : F.Fixes)
    Fixes.push_back(toJSON(R));
  json::Object O{{"check", F.Check},
                 {"level", levelName(F.Severity)},
                 {"file", F.Loc.File},
                 {"line", F.Loc.Line},
                 {"column", F.Loc.Column},
                 {"message", F.Message},
                 {"notes", std::move(Notes)},
                 {"fixes", std::move(Fixes)}};
  if (!F.UnsafeFixes.empty()) {
    json::Array Unsafe;
    for (const FixReplacement &R : F.UnsafeFixes)
      Unsafe.push_back(toJSON(R));
    O["unsafeFixes"] = std::move(Unsafe);
  }
  if (!F.Fingerprint.empty())
    O["fingerprint"] = F.Fingerprint;
  return O;
}

/// json::ObjectMapper has no unsigned overload.
static bool mapUnsigned(json::ObjectMapper &O, StringLiteral Key, unsigned &Out) {
  int64_t Value = 0;
  if (!O.map(Key, Value) || Value < 0 || Value > UINT32_MAX)
    return false;
  Out = static_cast<unsigned>(Value);
  return true;
}

bool fromJSON(const json::Value &V, Note &N, json::Path P) {
  json::ObjectMapper O(V, P);
  return O && O.map("file", N.Loc.File) && mapUnsigned(O, "line", N.Loc.Line) &&
         mapUnsigned(O, "column", N.Loc.Column) && O.map("message", N.Message);
}

bool fromJSON(const json::Value &V, FixReplacement &R, json::Path P) {
  json::ObjectMapper O(V, P);
  return O && O.map("file", R.Loc.File) && mapUnsigned(O, "offset", R.Loc.Offset) &&
         mapUnsigned(O, "length", R.Length) && O.map("replacement", R.Replacement) &&
         mapUnsigned(O, "line", R.Loc.Line) && mapUnsigned(O, "column", R.Loc.Column);
}

bool fromJSON(const json::Value &V, Finding &F, json::Path P) {
  json::ObjectMapper O(V, P);
  std::string LevelText;
  if (!O || !O.map("check", F.Check) || !O.map("level", LevelText) ||
      !O.map("file", F.Loc.File) || !mapUnsigned(O, "line", F.Loc.Line) ||
      !mapUnsigned(O, "column", F.Loc.Column) || !O.map("message", F.Message) ||
      !O.map("notes", F.Notes) || !O.map("fixes", F.Fixes) ||
      !O.mapOptional("unsafeFixes", F.UnsafeFixes) ||
      !O.mapOptional("fingerprint", F.Fingerprint))
    return false;
  if (LevelText != "warning" && LevelText != "error") {
    P.field("level").report("expected \"warning\" or \"error\"");
    return false;
  }
  F.Severity = LevelText == "error" ? Level::Error : Level::Warning;
  // Compiler errors are reported as clang-diagnostic-*; a check's finding at
  // error level was promoted by warnings-as-errors.
  F.WarningAsError = F.Severity == Level::Error &&
                     !StringRef(F.Check).starts_with("clang-diagnostic-");
  return true;
}

} // namespace torchtidy
