//===--- Fingerprint.cpp - torch-tidy driver ------------------------------===//

#include "Fingerprint.h"
#include "OutputFormats.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Path.h"

using namespace llvm;

namespace torchtidy {

namespace {

/// Walks C++ text, skipping comments and the insides of string and
/// character literals, and hands every other character to \p Visit.
template <typename Fn> void scanCode(StringRef Text, Fn Visit) {
  for (size_t I = 0; I < Text.size(); ++I) {
    char C = Text[I];
    if (C == '/' && I + 1 < Text.size() && Text[I + 1] == '/') {
      I = Text.find('\n', I);
      if (I == StringRef::npos)
        return;
      Visit(I, '\n');
      continue;
    }
    if (C == '/' && I + 1 < Text.size() && Text[I + 1] == '*') {
      I = Text.find("*/", I + 2);
      if (I == StringRef::npos)
        return;
      ++I;
      Visit(I, ' ');
      continue;
    }
    if (C == '"' || C == '\'') {
      Visit(I, C);
      for (++I; I < Text.size() && Text[I] != C && Text[I] != '\n'; ++I)
        if (Text[I] == '\\')
          ++I;
      Visit(I, C);
      continue;
    }
    Visit(I, C);
  }
}

/// \p Code with runs of whitespace made one space, trimmed.
std::string collapse(StringRef Code) {
  std::string Out;
  bool Space = false;
  for (char C : Code) {
    if (isSpace(C)) {
      Space = !Out.empty();
      continue;
    }
    if (Space)
      Out += ' ';
    Space = false;
    Out += C;
  }
  return Out;
}

bool startsWithKeyword(StringRef Header) {
  for (StringRef K : {"if", "for", "while", "switch", "catch", "else", "do",
                      "try", "namespace", "class", "struct", "union", "enum"})
    if (StringRef Rest = Header; Rest.consume_front(K) &&
                                 (Rest.empty() || (!isAlnum(Rest[0]) && Rest[0] != '_')))
      return true;
  return false;
}

} // namespace

std::string normalizedStatement(StringRef Text, unsigned Line) {
  // The lines of the statement, comments dropped.
  size_t Start = 0;
  for (unsigned L = 1; L < Line && Start != StringRef::npos; ++L) {
    Start = Text.find('\n', Start);
    if (Start != StringRef::npos)
      ++Start;
  }
  if (Start == StringRef::npos || Start >= Text.size())
    return "";
  std::string Code;
  unsigned Lines = 0;
  scanCode(Text.drop_front(Start), [&](size_t, char C) {
    if (Lines >= 8)
      return;
    if (C == '\n') {
      StringRef Trimmed = StringRef(Code).rtrim();
      if (!Trimmed.empty() &&
          (Trimmed.ends_with(";") || Trimmed.ends_with("{") ||
           Trimmed.ends_with("}")))
        Lines = 8;
      else
        ++Lines;
    }
    Code += C;
  });
  return collapse(Code);
}

std::string enclosingSignature(StringRef Text, unsigned Offset) {
  // The header of each open brace: the code since the last `;`, `{` or `}`.
  std::vector<std::string> Open;
  std::string Header;
  scanCode(Text.take_front(Offset), [&](size_t, char C) {
    if (C == '{') {
      Open.push_back(Header);
      Header.clear();
    } else if (C == '}') {
      if (!Open.empty())
        Open.pop_back();
      Header.clear();
    } else if (C == ';') {
      Header.clear();
    } else if (C != '"' && C != '\'') {
      Header += C;
    }
  });
  for (const std::string &H : Open) {
    StringRef Trimmed = StringRef(H);
    // The header starts after the last preprocessor line before it.
    if (size_t Hash = Trimmed.rfind('#'); Hash != StringRef::npos) {
      size_t End = Trimmed.find('\n', Hash);
      Trimmed = End == StringRef::npos ? "" : Trimmed.drop_front(End);
    }
    Trimmed = Trimmed.trim();
    if (Trimmed.contains('(') && !startsWithKeyword(Trimmed))
      return collapse(Trimmed);
  }
  return "";
}

void addFingerprints(std::vector<Finding> &Findings, StringRef Root,
                     SourceCache &Sources) {
  StringMap<unsigned> Seen;
  for (Finding &F : Findings) {
    std::string File = F.Loc.File;
    StringRef Relative = File;
    if (!Root.empty() && Relative.starts_with(Root) &&
        Relative.drop_front(Root.size()).starts_with("/"))
      Relative = Relative.drop_front(Root.size() + 1);
    std::string Statement, Signature;
    if (std::optional<StringRef> Text =
            F.Loc.File.empty() || F.Loc.Line == 0
                ? std::nullopt
                : Sources.contents(F.Loc.File);
        Text && F.Loc.Line <= Sources.lineCount(F.Loc.File)) {
      // From the line and column: a cached finding has no offset.
      size_t Offset = Sources.lineStart(F.Loc.File, F.Loc.Line) +
                      std::max(1u, F.Loc.Column) - 1;
      Statement = normalizedStatement(*Text, F.Loc.Line);
      Signature = enclosingSignature(*Text, std::min(Offset, Text->size()));
    }
    std::string Key = F.Check + '\0' +
                      sys::path::convert_to_slash(Relative) + '\0' +
                      Statement + '\0' + Signature;
    unsigned Index = Seen[Key]++;
    F.Fingerprint = sha256Hex(Key + '\0' + std::to_string(Index)).substr(0, 32);
  }
}

} // namespace torchtidy
