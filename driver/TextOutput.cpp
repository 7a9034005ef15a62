//===--- TextOutput.cpp - torch-tidy driver -------------------------------===//
//
// clang-tidy's text format: `file:line:col: warning: message [check]`, then
// the source line and a caret, in the layout clang 19 uses (line numbers in a
// gutter), and `note:` lines the same way. Colours as clang's, only when the
// stream has them enabled (--color); otherwise the bytes are the same wherever
// the output goes.
//
//===----------------------------------------------------------------------===//

#include "OutputFormats.h"

#include "CheckDescriptions.h"
#include "llvm/Support/Format.h"

using namespace llvm;

namespace torchtidy {

std::string describeCheck(StringRef Check) {
  std::string_view D = clang::tidy::torch::getCheckDescription(
      std::string_view(Check.data(), Check.size()));
  return std::string(D);
}

namespace {
/// One source line as clang shows it: tabs expanded to the next multiple of
/// 8, and the display column of every byte.
struct DisplayLine {
  std::string Text;
  std::vector<unsigned> Column; // 0-based display column of byte I; size+1

  explicit DisplayLine(StringRef Line) {
    for (char C : Line) {
      Column.push_back(Text.size());
      if (C == '\t')
        Text.append(8 - Text.size() % 8, ' ');
      else
        Text += C;
    }
    Column.push_back(Text.size());
  }
  /// Display column of byte column \p ByteColumn (1-based); past the end of
  /// the line it continues one column per byte.
  unsigned at(unsigned ByteColumn) const {
    unsigned I = ByteColumn ? ByteColumn - 1 : 0;
    if (I < Column.size())
      return Column[I];
    return Column.back() + (I - (Column.size() - 1));
  }
};

unsigned gutterWidth(unsigned Line) {
  return std::max<size_t>(4, std::to_string(Line).size());
}
} // namespace

static void printSnippet(raw_ostream &OS, const Location &Loc,
                         StringRef SourceLine, ArrayRef<ByteRange> Ranges) {
  if (Loc.File.empty() || Loc.Line == 0)
    return;
  DisplayLine Line(SourceLine);
  std::string LineNo = std::to_string(Loc.Line);
  unsigned Width = gutterWidth(Loc.Line);
  OS << ' ' << std::string(Width - LineNo.size(), ' ') << LineNo << " | "
     << Line.Text << '\n';

  // Markers: `~` under the highlighted ranges on this line, `^` at Loc.
  unsigned LineStart = Loc.Offset - (Loc.Column - 1);
  unsigned Caret = Line.at(Loc.Column);
  std::string Marks(std::max<size_t>(Line.Text.size(), Caret) + 1, ' ');
  for (const ByteRange &R : Ranges) {
    if (R.Offset + R.Length <= LineStart ||
        R.Offset >= LineStart + SourceLine.size())
      continue;
    unsigned Begin = R.Offset > LineStart ? R.Offset - LineStart : 0;
    unsigned End = std::min<unsigned>(R.Offset + R.Length - LineStart,
                                      SourceLine.size());
    for (unsigned D = Line.Column[Begin]; D < Line.Column[End]; ++D)
      Marks[D] = '~';
  }
  Marks[Caret] = '^';
  OS << ' ' << std::string(Width, ' ') << " | ";
  OS.changeColor(raw_ostream::GREEN, /*Bold=*/true);
  OS << StringRef(Marks).rtrim(' ');
  OS.resetColor();
  OS << '\n';
}

static void printHeader(raw_ostream &OS, const Location &Loc,
                        StringRef Kind) {
  if (!Loc.File.empty()) {
    OS.changeColor(raw_ostream::SAVEDCOLOR, /*Bold=*/true);
    OS << Loc.File << ':' << Loc.Line << ':' << Loc.Column << ": ";
    OS.resetColor();
  }
  OS.changeColor(Kind == "error"     ? raw_ostream::RED
                 : Kind == "warning" ? raw_ostream::MAGENTA
                                     : raw_ostream::CYAN,
                 /*Bold=*/true);
  OS << Kind << ": ";
  OS.resetColor();
}

void printText(const Report &R, raw_ostream &OS) {
  for (const Finding &F : R.Findings) {
    printHeader(OS, F.Loc, levelName(F.Severity));
    OS.changeColor(raw_ostream::SAVEDCOLOR, /*Bold=*/true);
    OS << F.Message << " [" << F.Check
       << (F.WarningAsError ? ",-warnings-as-errors" : "") << "]";
    OS.resetColor();
    OS << '\n';
    printSnippet(OS, F.Loc, F.SourceLine, F.Ranges);
    // A one-line fix-it is shown under the caret, as clang does.
    if (F.Fixes.size() == 1 && F.Fixes[0].Loc.File == F.Loc.File &&
        F.Fixes[0].Loc.Line == F.Loc.Line &&
        StringRef(F.Fixes[0].Replacement).find('\n') == StringRef::npos &&
        !F.Fixes[0].Replacement.empty()) {
      unsigned Column = DisplayLine(F.SourceLine).at(F.Fixes[0].Loc.Column);
      OS << ' ' << std::string(gutterWidth(F.Loc.Line), ' ') << " | ";
      OS.changeColor(raw_ostream::GREEN);
      OS << std::string(Column, ' ') << F.Fixes[0].Replacement;
      OS.resetColor();
      OS << '\n';
    }
    for (const Note &N : F.Notes) {
      printHeader(OS, N.Loc, "note");
      OS << N.Message << '\n';
      printSnippet(OS, N.Loc, N.SourceLine, N.Ranges);
    }
  }
}

} // namespace torchtidy
