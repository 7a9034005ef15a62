//===--- HtmlFinding.cpp - torch-tidy driver ------------------------------===//
//
// One finding of the HTML report: a header (check, linked to its page;
// level; location; message), then its source read now, a few lines around
// each step, with the warning (step 1) and its notes (2, 3, ... in their
// order: the chain of a finding across calls) as numbered bubbles under
// their lines, and the fix-it as a diff of the lines it changes. A file whose
// digest no longer matches, or a line past a file's end, gets a warning that
// the lines may not be the ones reported.
//
//===----------------------------------------------------------------------===//

#include "HtmlParts.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include <set>

using namespace llvm;

namespace torchtidy::html {
namespace {

/// Longer lines are cut (a minified or generated line would fill the page).
constexpr size_t MaxLineBytes = 400;
/// Lines shown before and after each step's line; gaps of up to this many
/// lines are shown rather than elided.
constexpr unsigned Context = 2;

struct Step {
  unsigned Number;
  const Location &Loc;
  StringRef Message;
};

bool isIdentifierChar(char C) { return isAlnum(C) || C == '_'; }

/// \p Line cut to MaxLineBytes, on a UTF-8 character boundary.
StringRef cut(StringRef Line) {
  if (Line.size() <= MaxLineBytes)
    return Line;
  size_t End = MaxLineBytes;
  while (End > 0 && (uint8_t(Line[End]) & 0xC0) == 0x80)
    --End;
  return Line.take_front(End);
}

class FindingPrinter {
public:
  FindingPrinter(PageModel &M, const Finding &F, raw_ostream &OS)
      : M(M), F(F), OS(OS) {
    Steps.push_back({1, F.Loc, F.Message});
    for (const Note &N : F.Notes)
      Steps.push_back({unsigned(Steps.size()) + 1, N.Loc, N.Message});
  }

  void print(unsigned Number) {
    StringRef Level = levelName(F.Severity);
    std::string Href = M.docsHref(F.Check);
    OS << "<article class=\"f g-" << ruleGroup(F.Check) << "\" id=\"f"
       << Number << "\" data-check=\"" << escaped(F.Check)
       << "\" data-file=\"" << M.FileIndex[F.Loc.File] << "\">\n<h3><a "
       << "class=\"num\" href=\"#f" << Number << "\">#" << Number
       << "</a> <span class=\"lv lv-" << Level << "\">" << Level
       << "</span> ";
    if (Href.empty())
      OS << "<span class=\"chk\">" << escaped(F.Check) << "</span>";
    else
      OS << "<a class=\"chk\" href=\"" << escaped(Href) << "\">"
         << escaped(F.Check) << "</a>";
    // The message is step 1, under its line.
    OS << " <span class=\"loc\">" << escaped(position(F.Loc))
       << "</span></h3>\n";
    printProblems();
    printSteps();
    printFix();
    OS << "</article>\n";
  }

private:
  std::string position(const Location &L) const {
    if (L.File.empty())
      return "(no location)";
    return M.display(L.File) + ":" + std::to_string(L.Line) + ":" +
           std::to_string(L.Column);
  }

  /// The files of the steps (the finding's first) in the order they appear.
  std::vector<StringRef> stepFiles() const {
    std::vector<StringRef> Files;
    for (const Step &S : Steps)
      if (!is_contained(Files, S.Loc.File))
        Files.push_back(S.Loc.File);
    return Files;
  }

  void printProblems() {
    std::set<std::string> Files;
    for (const Step &S : Steps)
      Files.insert(S.Loc.File);
    for (const FixReplacement &Fix : F.Fixes)
      Files.insert(Fix.Loc.File);
    for (const std::string &File : Files)
      if (!File.empty() && M.changedSince(File))
        OS << "<p class=\"stale\">" << escaped(M.display(File))
           << " changed since the analysis (its SHA-256 differs from the one "
              "recorded with the findings): the lines shown may not be the "
              "ones reported.</p>\n";
    for (const Step &S : Steps) {
      unsigned Lines = M.Sources.lineCount(S.Loc.File);
      if (Lines && S.Loc.Line > Lines)
        OS << "<p class=\"stale\">Line " << S.Loc.Line << " of "
           << escaped(M.display(S.Loc.File)) << " is past its end (" << Lines
           << " lines): the file changed since the analysis.</p>\n";
    }
  }

  void printBubble(const Step &S, bool WithPosition) {
    bool IsWarning = S.Number == 1;
    OS << "<div class=\"st " << (IsWarning ? "w" : "n") << "\"><b>" << S.Number
       << "</b>";
    if (WithPosition)
      OS << "<span class=\"at\">" << escaped(position(S.Loc)) << "</span> ";
    OS << escaped(S.Message) << "</div>\n";
  }

  void printSteps() {
    for (StringRef File : stepFiles()) {
      std::vector<const Step *> Here;
      for (const Step &S : Steps)
        if (S.Loc.File == File)
          Here.push_back(&S);
      OS << "<div class=\"src\">";
      if (File != F.Loc.File)
        OS << "<div class=\"cap\">" << escaped(M.display(File)) << "</div>";
      OS << '\n';
      unsigned Lines = File.empty() ? 0 : M.Sources.lineCount(File);
      if (!File.empty() && !M.Sources.contents(File))
        OS << "<p class=\"na\">The source is not available: "
           << escaped(M.display(File)) << " cannot be read.</p>\n";
      // Steps with a line in the file are shown in context, the others
      // (no location, unreadable file, past the end) as a list.
      std::vector<const Step *> InContext, Listed;
      for (const Step *S : Here)
        (S->Loc.Line >= 1 && S->Loc.Line <= Lines ? InContext : Listed)
            .push_back(S);
      printContext(File, Lines, InContext);
      for (const Step *S : Listed)
        printBubble(*S, /*WithPosition=*/!File.empty());
      OS << "</div>\n";
    }
  }

  void printContext(StringRef File, unsigned Lines,
                    ArrayRef<const Step *> Here) {
    std::set<unsigned> StepLines;
    for (const Step *S : Here)
      StepLines.insert(S->Loc.Line);
    // Windows of context around each step's line, merged when they are
    // no more than a window apart.
    std::vector<std::pair<unsigned, unsigned>> Windows;
    for (unsigned L : StepLines) {
      unsigned First = L > 2 * Context + 1 ? L - Context : 1;
      unsigned Last = L + 2 * Context >= Lines ? Lines : L + Context;
      if (!Windows.empty() && First <= Windows.back().second + Context + 1)
        Windows.back().second = std::max(Windows.back().second, Last);
      else
        Windows.push_back({First, Last});
    }
    for (size_t W = 0; W < Windows.size(); ++W) {
      if (W > 0 || Windows[W].first > 1)
        OS << "<div class=\"gap\">\xE2\x8B\xAF</div>\n"; // U+22EF
      for (unsigned L = Windows[W].first; L <= Windows[W].second; ++L) {
        std::vector<const Step *> At;
        for (const Step *S : Here)
          if (S->Loc.Line == L)
            At.push_back(S);
        printLine(File, L, At);
        for (const Step *S : At)
          printBubble(*S, /*WithPosition=*/false);
      }
    }
    if (!Windows.empty() && Windows.back().second < Lines)
      OS << "<div class=\"gap\">\xE2\x8B\xAF</div>\n";
  }

  /// A source line, with the token at each step's column marked.
  void printLine(StringRef File, unsigned L, ArrayRef<const Step *> At) {
    StringRef Text = M.Sources.lineText(File, L);
    StringRef Shown = cut(Text);
    const char *Kind = "";
    if (!At.empty())
      Kind = At.front()->Number == 1 ? " hw" : " hn";
    OS << "<div class=\"ln" << Kind << "\"><i>" << L << "</i>";
    std::set<size_t> Starts;
    for (const Step *S : At)
      if (S->Loc.Column >= 1 && S->Loc.Column <= Shown.size())
        Starts.insert(S->Loc.Column - 1);
    size_t Pos = 0;
    for (size_t Start : Starts) {
      if (Start < Pos)
        continue;
      size_t End = Start + 1;
      if (isIdentifierChar(Shown[Start]))
        while (End < Shown.size() && isIdentifierChar(Shown[End]))
          ++End;
      OS << escaped(Shown.slice(Pos, Start)) << "<mark>"
         << escaped(Shown.slice(Start, End)) << "</mark>";
      Pos = End;
    }
    OS << escaped(Shown.drop_front(Pos));
    if (Shown.size() < Text.size())
      OS << "<span class=\"cut\">\xE2\x80\xA6 (" << Text.size() - Shown.size()
         << " more bytes)</span>";
    OS << "</div>\n";
  }

  //===--- The fix-it as a diff -------------------------------------------===//

  void printFix() {
    if (F.Fixes.empty())
      return;
    std::vector<const FixReplacement *> Fixes;
    for (const FixReplacement &Fix : F.Fixes)
      Fixes.push_back(&Fix);
    llvm::stable_sort(Fixes, [](const FixReplacement *A,
                                const FixReplacement *B) {
      return std::tie(A->Loc.File, A->Loc.Offset, A->Length) <
             std::tie(B->Loc.File, B->Loc.Offset, B->Length);
    });
    OS << "<div class=\"fix\"><div class=\"cap\">Fix-it</div>\n";
    for (size_t I = 0; I < Fixes.size();) {
      size_t End = I;
      while (End < Fixes.size() && Fixes[End]->Loc.File == Fixes[I]->Loc.File)
        ++End;
      printFileFix(ArrayRef(Fixes).slice(I, End - I));
      I = End;
    }
    OS << "</div>\n";
  }

  /// The replacements of one file, sorted by offset.
  void printFileFix(ArrayRef<const FixReplacement *> Fixes) {
    StringRef File = Fixes.front()->Loc.File;
    std::optional<StringRef> Text = M.Sources.contents(File);
    bool InContext = Text && !M.changedSince(File);
    for (size_t I = 0; InContext && I < Fixes.size(); ++I)
      InContext = Fixes[I]->Loc.Offset + Fixes[I]->Length <= Text->size() &&
                  (I == 0 || Fixes[I - 1]->Loc.Offset + Fixes[I - 1]->Length <=
                                 Fixes[I]->Loc.Offset);
    OS << "<div class=\"src diff\">";
    if (File != F.Loc.File)
      OS << "<div class=\"cap\">" << escaped(M.display(File)) << "</div>";
    OS << '\n';
    if (!InContext) {
      for (const FixReplacement *Fix : Fixes)
        OS << "<div class=\"st n\">Replace " << Fix->Length
           << " byte(s) at offset " << Fix->Loc.Offset << " of "
           << escaped(M.display(File)) << " with <code>"
           << escaped(Fix->Replacement) << "</code></div>\n";
      OS << "</div>\n";
      return;
    }
    // Replacements on the same or adjacent lines make one hunk.
    size_t I = 0;
    while (I < Fixes.size()) {
      unsigned First = lineOf(File, Fixes[I]->Loc.Offset);
      unsigned Last = lineOf(File, Fixes[I]->Loc.Offset + Fixes[I]->Length);
      size_t End = I + 1;
      for (; End < Fixes.size(); ++End) {
        if (lineOf(File, Fixes[End]->Loc.Offset) > Last + 1)
          break;
        Last = std::max(
            Last, lineOf(File, Fixes[End]->Loc.Offset + Fixes[End]->Length));
      }
      printHunk(*Text, File, First, Last, ArrayRef(Fixes).slice(I, End - I));
      I = End;
    }
    OS << "</div>\n";
  }

  unsigned lineOf(StringRef File, unsigned Offset) {
    Location L;
    L.File = File.str();
    L.Offset = Offset;
    M.Sources.resolve(L);
    return L.Line;
  }

  void printHunk(StringRef Text, StringRef File, unsigned First, unsigned Last,
                 ArrayRef<const FixReplacement *> Fixes) {
    Last = std::min(Last, M.Sources.lineCount(File));
    size_t Begin = M.Sources.lineStart(File, First);
    size_t End = M.Sources.lineStart(File, Last) +
                 M.Sources.lineText(File, Last).size();
    std::string New;
    size_t Pos = Begin;
    for (const FixReplacement *Fix : Fixes) {
      New += Text.slice(Pos, Fix->Loc.Offset);
      New += Fix->Replacement;
      Pos = Fix->Loc.Offset + Fix->Length;
    }
    End = std::max(End, Pos);
    New += Text.slice(Pos, End);
    printDiffLines(Text.slice(Begin, End), First, "del", '-');
    printDiffLines(New, First, "add", '+');
  }

  void printDiffLines(StringRef Lines, unsigned Number, StringRef Kind,
                      char Sign) {
    SmallVector<StringRef, 4> Split;
    Lines.split(Split, '\n');
    for (StringRef Line : Split)
      OS << "<div class=\"ln " << Kind << "\"><i>" << Number++ << "</i>"
         << Sign << ' ' << escaped(cut(Line.rtrim('\r'))) << "</div>\n";
  }

  PageModel &M;
  const Finding &F;
  raw_ostream &OS;
  std::vector<Step> Steps;
};

} // namespace

void printFinding(PageModel &M, const Finding &F, unsigned Number,
                  raw_ostream &OS) {
  FindingPrinter(M, F, OS).print(Number);
}

} // namespace torchtidy::html
