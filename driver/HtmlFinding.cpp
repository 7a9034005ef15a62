//===--- HtmlFinding.cpp - torch-tidy driver ------------------------------===//
//
// The findings of the HTML report, as the page's data island: a JSON
// document in <script type="application/json" id="report-data"> that
// report.js renders, a screenful at a time (10,000 findings as elements
// would take seconds to parse). This file decides everything the page
// shows; the script only builds the elements:
//
//   {"files":    ["<path relative to the common directory>", ...],
//    "checks":   {"<check>": {"group": "device", "docs": "#doc-<check>"}},
//    "messages": ["<message>", ...],
//    "sources":  {"<file index>": {"<line>": "<text>" | ["<cut text>", <bytes cut>]}},
//    "findings": [{
//       "check": "<check>", "level": "warning",
//       "steps":  [[<file index or -1>, <line>, <column>, <message index>], ...],
//                 // [0] is the warning, then the notes in their order
//       "blocks": [{"file": <index>, "rows": [...], "listed": [<step>...],
//                   "unreadable": true}],
//       "problems": ["<why the lines may not be the ones reported>"],
//       "fixes":  [{"file": <index>, "diff": [[<line>, "-" | "+", "<text>"]...]}
//                  | {"file": <index>, "replace": ["<what to replace>"...]}],
//       "new":    true}],   // with a baseline: not in it
//    "baseline": true}      // the report was made against a baseline
//
// A block shows one file's steps: rows are a source line (> 0), a gap (0)
// or the bubble of step n (-n) under its line; `listed` steps have no line
// in the file (no location, unreadable, past the end) and are shown with
// their position. Messages are stored once (a note such as "the loop that
// repeats the call" recurs thousands of times in a large audit). Every '<'
// of the document is written as \u003c, so that no text can end the script
// element.
//
//===----------------------------------------------------------------------===//

#include "HtmlParts.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include <set>

using namespace llvm;

namespace torchtidy::html {
namespace {

/// Longer lines are cut (a minified or generated line would fill the page).
constexpr size_t MaxLineBytes = 400;
/// Lines shown before and after each step's line; gaps of up to this many
/// lines are shown rather than elided.
constexpr unsigned Context = 2;

/// Text for a JSON string: llvm::json needs valid UTF-8.
std::string utf8(StringRef Text) {
  return json::isUTF8(Text) ? Text.str() : json::fixUTF8(Text);
}

/// \p Line cut to MaxLineBytes, on a UTF-8 character boundary.
StringRef cut(StringRef Line) {
  if (Line.size() <= MaxLineBytes)
    return Line;
  size_t End = MaxLineBytes;
  while (End > 0 && (uint8_t(Line[End]) & 0xC0) == 0x80)
    --End;
  return Line.take_front(End);
}

struct Step {
  unsigned Number;
  const Location &Loc;
  StringRef Message;
};

class FindingData {
public:
  /// What the findings share: the lines shown, per file index, and the
  /// messages, numbered.
  struct Tables {
    std::map<unsigned, json::Object> Lines;
    StringMap<unsigned> MessageIndex;
    json::Array Messages;
  };

  FindingData(PageModel &M, const Finding &F, bool IsNew, Tables &Shared)
      : M(M), F(F), IsNew(IsNew), Shared(Shared) {
    Steps.push_back({1, F.Loc, F.Message});
    for (const Note &N : F.Notes)
      Steps.push_back({unsigned(Steps.size()) + 1, N.Loc, N.Message});
  }

  json::Object build() {
    json::Array StepData, Blocks, FixData;
    for (const Step &S : Steps)
      StepData.push_back(json::Array{fileIndex(S.Loc.File), S.Loc.Line,
                                     S.Loc.Column, messageIndex(S.Message)});
    for (StringRef File : stepFiles())
      Blocks.push_back(block(File));
    printFixes(FixData);
    json::Object O{{"check", utf8(F.Check)},
                   {"level", levelName(F.Severity)},
                   {"steps", std::move(StepData)},
                   {"blocks", std::move(Blocks)}};
    json::Array Problems = problems();
    if (!Problems.empty())
      O["problems"] = std::move(Problems);
    if (!FixData.empty())
      O["fixes"] = std::move(FixData);
    if (IsNew)
      O["new"] = true;
    return O;
  }

private:
  unsigned messageIndex(StringRef Message) {
    auto [It, New] =
        Shared.MessageIndex.try_emplace(Message, Shared.Messages.size());
    if (New)
      Shared.Messages.push_back(utf8(Message));
    return It->second;
  }

  int64_t fileIndex(StringRef File) const {
    return File.empty() ? -1 : int64_t(M.FileIndex.at(File.str()));
  }

  /// The files of the steps (the finding's first) in the order they appear.
  std::vector<StringRef> stepFiles() const {
    std::vector<StringRef> Files;
    for (const Step &S : Steps)
      if (!is_contained(Files, S.Loc.File))
        Files.push_back(S.Loc.File);
    return Files;
  }

  json::Array problems() {
    json::Array Out;
    std::set<std::string> Files;
    for (const Step &S : Steps)
      Files.insert(S.Loc.File);
    for (const FixReplacement &Fix : F.Fixes)
      Files.insert(Fix.Loc.File);
    for (const std::string &File : Files)
      if (!File.empty() && M.changedSince(File))
        Out.push_back(utf8(M.display(File) +
                           " changed since the analysis (its SHA-256 differs "
                           "from the one recorded with the findings): the "
                           "lines shown may not be the ones reported."));
    std::set<std::pair<StringRef, unsigned>> PastEnd;
    for (const Step &S : Steps) {
      unsigned Lines = M.Sources.lineCount(S.Loc.File);
      if (Lines && S.Loc.Line > Lines &&
          PastEnd.insert({S.Loc.File, S.Loc.Line}).second)
        Out.push_back(utf8(formatv("Line {0} of {1} is past its end ({2} "
                                   "lines): the file changed since the "
                                   "analysis.",
                                   S.Loc.Line, M.display(S.Loc.File), Lines)
                               .str()));
    }
    return Out;
  }

  void addSourceLine(StringRef File, unsigned Line) {
    json::Object &Lines = Shared.Lines[M.FileIndex.at(File.str())];
    std::string Key = std::to_string(Line);
    if (Lines.get(Key))
      return;
    StringRef Text = M.Sources.lineText(File, Line);
    StringRef Shown = cut(Text);
    if (Shown.size() == Text.size())
      Lines[Key] = utf8(Text);
    else
      Lines[Key] = json::Array{utf8(Shown), int64_t(Text.size() - Shown.size())};
  }

  json::Object block(StringRef File) {
    json::Object Block{{"file", fileIndex(File)}};
    unsigned Lines = File.empty() ? 0 : M.Sources.lineCount(File);
    if (!File.empty() && !M.Sources.contents(File))
      Block["unreadable"] = true;
    std::set<unsigned> StepLines;
    json::Array Listed;
    for (const Step &S : Steps) {
      if (S.Loc.File != File)
        continue;
      if (S.Loc.Line >= 1 && S.Loc.Line <= Lines)
        StepLines.insert(S.Loc.Line);
      else
        Listed.push_back(S.Number);
    }
    // Windows of context around each step's line, merged when no more than
    // Context lines lie between them; a gap of more is elided.
    std::vector<std::pair<unsigned, unsigned>> Windows;
    for (unsigned L : StepLines) {
      unsigned First = L > 2 * Context + 1 ? L - Context : 1;
      unsigned Last = L + 2 * Context >= Lines ? Lines : L + Context;
      if (!Windows.empty() && First <= Windows.back().second + Context + 1)
        Windows.back().second = std::max(Windows.back().second, Last);
      else
        Windows.push_back({First, Last});
    }
    json::Array Rows;
    for (const auto &[First, Last] : Windows) {
      if (First > 1)
        Rows.push_back(0);
      for (unsigned L = First; L <= Last; ++L) {
        addSourceLine(File, L);
        Rows.push_back(L);
        for (const Step &S : Steps)
          if (S.Loc.File == File && S.Loc.Line == L)
            Rows.push_back(-int64_t(S.Number));
      }
    }
    if (!Windows.empty() && Windows.back().second < Lines)
      Rows.push_back(0);
    Block["rows"] = std::move(Rows);
    if (!Listed.empty())
      Block["listed"] = std::move(Listed);
    return Block;
  }

  //===--- The fix-it as a diff -------------------------------------------===//

  void printFixes(json::Array &Out) {
    std::vector<const FixReplacement *> Fixes;
    for (const FixReplacement &Fix : F.Fixes)
      Fixes.push_back(&Fix);
    llvm::stable_sort(Fixes, [](const FixReplacement *A,
                                const FixReplacement *B) {
      return std::tie(A->Loc.File, A->Loc.Offset, A->Length) <
             std::tie(B->Loc.File, B->Loc.Offset, B->Length);
    });
    for (size_t I = 0; I < Fixes.size();) {
      size_t End = I;
      while (End < Fixes.size() && Fixes[End]->Loc.File == Fixes[I]->Loc.File)
        ++End;
      Out.push_back(fileFix(ArrayRef(Fixes).slice(I, End - I)));
      I = End;
    }
  }

  /// The replacements of one file, sorted by offset: a diff of the lines
  /// they change when the file is as it was, else what they replace.
  json::Object fileFix(ArrayRef<const FixReplacement *> Fixes) {
    StringRef File = Fixes.front()->Loc.File;
    json::Object Out{{"file", fileIndex(File)}};
    std::optional<StringRef> Text = M.Sources.contents(File);
    bool InContext = Text && !M.changedSince(File);
    for (size_t I = 0; InContext && I < Fixes.size(); ++I)
      InContext = Fixes[I]->Loc.Offset + Fixes[I]->Length <= Text->size() &&
                  (I == 0 || Fixes[I - 1]->Loc.Offset + Fixes[I - 1]->Length <=
                                 Fixes[I]->Loc.Offset);
    if (!InContext) {
      json::Array Replace;
      for (const FixReplacement *Fix : Fixes)
        Replace.push_back(utf8(formatv("Replace {0} byte(s) at offset {1} "
                                       "with '{2}'",
                                       Fix->Length, Fix->Loc.Offset,
                                       Fix->Replacement)
                                   .str()));
      Out["replace"] = std::move(Replace);
      return Out;
    }
    // Replacements on the same or adjacent lines make one hunk.
    json::Array Diff;
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
      addHunk(*Text, File, First, Last, ArrayRef(Fixes).slice(I, End - I),
              Diff);
      I = End;
    }
    Out["diff"] = std::move(Diff);
    return Out;
  }

  unsigned lineOf(StringRef File, unsigned Offset) {
    Location L;
    L.File = File.str();
    L.Offset = Offset;
    M.Sources.resolve(L);
    return L.Line;
  }

  void addHunk(StringRef Text, StringRef File, unsigned First, unsigned Last,
               ArrayRef<const FixReplacement *> Fixes, json::Array &Diff) {
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
    addDiffLines(Text.slice(Begin, End), First, "-", Diff);
    addDiffLines(New, First, "+", Diff);
  }

  static void addDiffLines(StringRef Lines, unsigned Number, StringRef Sign,
                           json::Array &Diff) {
    SmallVector<StringRef, 4> Split;
    Lines.split(Split, '\n');
    for (StringRef Line : Split)
      Diff.push_back(
          json::Array{Number++, Sign, utf8(cut(Line.rtrim('\r')))});
  }

  PageModel &M;
  const Finding &F;
  bool IsNew;
  Tables &Shared;
  std::vector<Step> Steps;
};

} // namespace

void printFindingData(PageModel &M, raw_ostream &OS) {
  json::Array Findings;
  FindingData::Tables Shared;
  for (size_t I = 0; I < M.R.Findings.size(); ++I)
    Findings.push_back(
        FindingData(M, M.R.Findings[I], !M.IsNew.empty() && M.IsNew[I], Shared)
            .build());
  json::Array Files;
  for (const std::string &File : M.Files)
    Files.push_back(utf8(M.display(File)));
  json::Object Checks, Sources;
  for (const auto &[Check, Count] : M.PerCheck)
    Checks[utf8(Check)] = json::Object{{"group", ruleGroup(Check)},
                                       {"docs", utf8(M.docsHref(Check))}};
  for (auto &[File, FileLines] : Shared.Lines)
    Sources[std::to_string(File)] = std::move(FileLines);
  json::Value Data = json::Object{{"files", std::move(Files)},
                                  {"checks", std::move(Checks)},
                                  {"messages", std::move(Shared.Messages)},
                                  {"sources", std::move(Sources)},
                                  {"findings", std::move(Findings)}};
  if (M.R.HasBaseline)
    Data.getAsObject()->try_emplace("baseline", true);
  std::string Text;
  raw_string_ostream(Text) << Data;
  OS << "<script type=\"application/json\" id=\"report-data\">";
  for (char C : Text) {
    if (C == '<')
      OS << "\\u003c"; // no "</script>", no "<!--" inside the element
    else
      OS << C;
  }
  OS << "</script>\n";
}

} // namespace torchtidy::html
