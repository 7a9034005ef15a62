//===--- HtmlSummary.cpp - torch-tidy driver ------------------------------===//
//
// The report's summary: totals, counts by rule group and by check as inline
// SVG bar charts (a bar links to the check's filter), counts by file worst
// first, the files that were not analysed or did not compile with their
// first error, and the run's own figures in their delimited element.
//
//===----------------------------------------------------------------------===//

#include "HtmlParts.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace llvm;

namespace torchtidy::html {

namespace {

/// The groups of the check catalog (../shared/checks.md), in its order.
const std::pair<StringRef, StringRef> CatalogGroups[] = {
    {"device", "Device placement"},
    {"copies", "Copies (host and device)"},
    {"memory", "GPU memory"},
    {"training", "Training correctness"},
};
const std::pair<StringRef, StringRef> CheckGroups[] = {
    {"torch-device-mismatch", "device"},
    {"torch-tensor-to-discarded", "device"},
    {"torch-cuda-unguarded", "device"},
    {"torch-device-index-unchecked", "device"},
    {"torch-non-blocking-pageable", "copies"},
    {"torch-non-blocking-d2h-race", "copies"},
    {"torch-pin-memory-discarded", "copies"},
    {"torch-empty-cache-in-loop", "memory"},
    {"torch-empty-cache-oom-retry", "memory"},
    {"torch-loss-accumulation-graph", "memory"},
    {"torch-inference-without-no-grad", "memory"},
    {"torch-host-sync-in-loop", "memory"},
    {"torch-missing-zero-grad", "training"},
    {"torch-grad-accumulation-unscaled", "training"},
    {"torch-eval-mode-missing", "training"},
    {"torch-autocast-region", "training"},
};

StringRef groupLabel(StringRef Group) {
  for (const auto &[Id, Label] : CatalogGroups)
    if (Id == Group)
      return Label;
  return Group == "compiler" ? "Compiler diagnostics" : "Other checks";
}

struct Bar {
  std::string Label, Id, Href, Group;
  unsigned Count = 0;
};

/// A horizontal bar chart; each bar is an <a> (when it has an Href) with
/// the bar's id and `data-count`.
void printBarChart(StringRef Id, StringRef Title, ArrayRef<Bar> Bars,
                   raw_ostream &OS) {
  constexpr unsigned RowHeight = 26, BarSpace = 240, CharWidth = 8;
  size_t Longest = 8;
  unsigned Max = 1;
  for (const Bar &B : Bars) {
    Longest = std::max(Longest, B.Label.size());
    Max = std::max(Max, B.Count);
  }
  unsigned LabelWidth = std::min<unsigned>(Longest * CharWidth + 12, 320);
  unsigned Width = LabelWidth + BarSpace + 56;
  unsigned Height = Bars.size() * RowHeight + 6;
  OS << "<figure class=\"chart\"><figcaption>" << escaped(Title)
     << "</figcaption>\n<svg id=\"" << Id << "\" viewBox=\"0 0 " << Width
     << ' ' << Height << "\" width=\"" << Width << "\" height=\"" << Height
     << "\" role=\"img\" aria-label=\"" << escaped(Title) << "\">\n";
  for (size_t I = 0; I < Bars.size(); ++I) {
    const Bar &B = Bars[I];
    unsigned Y = I * RowHeight + 4;
    unsigned W = B.Count ? std::max(3u, B.Count * BarSpace / Max) : 0;
    OS << (B.Href.empty() ? "<g" : "<a href=\"" + B.Href + "\"") << " id=\""
       << escaped(B.Id) << "\" class=\"bar g-" << B.Group
       << "\" data-count=\"" << B.Count << "\"><title>" << escaped(B.Label)
       << ": " << B.Count << "</title>"
       << "<text x=\"" << LabelWidth - 8 << "\" y=\"" << Y + 16
       << "\" text-anchor=\"end\">" << escaped(B.Label) << "</text>"
       << "<rect x=\"" << LabelWidth << "\" y=\"" << Y + 3 << "\" width=\""
       << W << "\" height=\"18\" rx=\"3\"/>"
       << "<text class=\"n\" x=\"" << LabelWidth + W + 6 << "\" y=\"" << Y + 16
       << "\">" << B.Count << "</text>" << (B.Href.empty() ? "</g>" : "</a>")
       << '\n';
  }
  OS << "</svg></figure>\n";
}

void printCard(StringRef Id, size_t Count, StringRef What, raw_ostream &OS) {
  OS << "<div class=\"card\"><b id=\"" << Id << "\">" << Count << "</b> "
     << What << "</div>\n";
}

void printCharts(PageModel &M, raw_ostream &OS) {
  std::map<StringRef, unsigned> PerGroup;
  for (const auto &[Check, Count] : M.PerCheck)
    PerGroup[ruleGroup(Check)] += Count;
  std::vector<Bar> Groups;
  auto AddGroup = [&](StringRef Id) {
    Groups.push_back({groupLabel(Id).str(), "group-" + Id.str(), "", Id.str(),
                      PerGroup[Id]});
  };
  // The catalog's groups even when empty, the others when not.
  for (const auto &Group : CatalogGroups)
    AddGroup(Group.first);
  for (StringRef Id : {"compiler", "other"})
    if (PerGroup[Id])
      AddGroup(Id);
  std::vector<Bar> Checks;
  for (const auto &[Check, Count] : M.PerCheck)
    Checks.push_back({Check, "bar-" + Check,
                      "#check=" + percentEncode(Check),
                      ruleGroup(Check).str(), Count});
  // Most findings first; the map already sorted equal counts by name.
  llvm::stable_sort(Checks, [](const Bar &A, const Bar &B) {
    return A.Count > B.Count;
  });
  OS << "<div class=\"charts\">\n";
  printBarChart("chart-groups", "Findings by rule group", Groups, OS);
  if (!Checks.empty())
    printBarChart("chart-checks", "Findings by check (a bar filters)", Checks,
                  OS);
  OS << "</div>\n";
}

void printFileRow(PageModel &M, unsigned Index, unsigned Errors,
                  raw_ostream &OS) {
  std::string Shown = M.display(M.Files[Index]);
  OS << "<tr><td><a href=\"#file=" << escaped(percentEncode(Shown)) << "\">"
     << escaped(Shown) << "</a></td><td class=\"num\">" << M.PerFile[Index]
     << "</td><td class=\"num\">" << Errors << "</td></tr>\n";
}

void printByFile(PageModel &M, raw_ostream &OS) {
  constexpr size_t Shown = 25;
  std::vector<unsigned> Errors(M.Files.size(), 0);
  for (const Finding &F : M.R.Findings)
    Errors[M.FileIndex[F.Loc.File]] += F.Severity == Level::Error;
  std::vector<unsigned> Order;
  for (unsigned I = 0; I < M.Files.size(); ++I)
    if (M.PerFile[I])
      Order.push_back(I);
  // Worst first: most findings, then most errors, then by path.
  llvm::stable_sort(Order, [&](unsigned A, unsigned B) {
    return std::make_pair(M.PerFile[A], Errors[A]) >
           std::make_pair(M.PerFile[B], Errors[B]);
  });
  OS << "<h3>By file, worst first</h3>\n";
  if (Order.empty()) {
    OS << "<p class=\"muted\">No file has a finding.</p>\n";
    return;
  }
  OS << "<table id=\"by-file\" class=\"counts\"><thead><tr><th>File</th>"
        "<th>Findings</th><th>Errors</th></tr></thead><tbody>\n";
  for (size_t I = 0; I < std::min(Order.size(), Shown); ++I)
    printFileRow(M, Order[I], Errors[Order[I]], OS);
  OS << "</tbody></table>\n";
  // The rest would be thousands of rows in a large audit; the file filter
  // lists every file with its count.
  if (Order.size() > Shown) {
    unsigned Rest = 0;
    for (size_t I = Shown; I < Order.size(); ++I)
      Rest += M.PerFile[Order[I]];
    OS << "<p class=\"muted\" id=\"by-file-rest\">And " << Order.size() - Shown
       << " more files with " << Rest
       << " findings in all: the file filter lists every file.</p>\n";
  }
}

void printToolErrors(PageModel &M, raw_ostream &OS) {
  OS << "<h3>Not analysed, or with compiler errors</h3>\n";
  if (M.R.ToolErrors.empty()) {
    OS << "<p class=\"muted\" id=\"tool-errors\">None: every file was "
          "analysed and compiled.</p>\n";
    return;
  }
  OS << "<table id=\"tool-errors\" class=\"counts\"><thead><tr><th>File</th>"
        "<th>Problem</th><th>First error</th></tr></thead><tbody>\n";
  for (const ToolError &E : M.R.ToolErrors) {
    // The message names the file again: shortened as in the table.
    std::string Message = E.Message, Short = M.display(E.File);
    for (size_t At = 0; !E.File.empty() &&
                        (At = Message.find(E.File, At)) != std::string::npos;
         At += Short.size())
      Message.replace(At, E.File.size(), Short);
    OS << "<tr><td>" << escaped(M.display(E.File)) << "</td><td>"
       << escaped(Message) << "</td><td>";
    // The first compiler error in the file itself: that is where a missing
    // header or a syntax error shows.
    const auto &Findings = M.R.Findings;
    auto First = llvm::find_if(Findings, [&](const Finding &F) {
      return isCompilerError(F) && !E.File.empty() && F.Loc.File == E.File;
    });
    if (First != Findings.end())
      OS << "<a href=\"#f" << (First - Findings.begin()) + 1 << "\">"
         << First->Loc.Line << ':' << First->Loc.Column << "</a> "
         << escaped(First->Message);
    OS << "</td></tr>\n";
  }
  OS << "</tbody></table>\n";
}

void printRunFigures(PageModel &M, raw_ostream &OS) {
  OS << "<h3>This run</h3>\n" << RunFiguresBegin << '\n';
  const std::optional<RunFigures> &Run = M.Options.Figures;
  if (!Run) {
    OS << "<p id=\"run-figures\" class=\"muted\">Made by <code>torch-tidy "
          "report</code> from "
       << escaped(M.Options.Inputs)
       << ". Saved findings do not record the run's figures (translation "
          "units, result cache, precompiled headers, wall time); "
          "<code>--format=html</code> on the run shows them.</p>\n";
  } else {
    auto Figure = [&](StringRef Id, StringRef Name, const Twine &Value) {
      OS << "<dt>" << Name << "</dt><dd id=\"figure-" << Id << "\">" << Value
         << "</dd>";
    };
    OS << "<dl id=\"run-figures\" class=\"figures\">";
    Figure("tus", "Translation units", Twine(Run->TranslationUnits));
    if (Run->Audit) {
      const AuditStats &A = *Run->Audit;
      Figure("cache", "From the result cache", Twine(A.FromCache));
      Figure("analysed", "Analysed", Twine(A.Analysed));
      Figure("pch", "With a precompiled header",
             formatv("{0} ({1} precompiled header(s) built)", A.WithPCH,
                     A.PCHsBuilt));
    } else {
      Figure("mode", "Mode",
             "each file parsed in full (<code>--audit</code> adds the result "
             "cache and shared precompiled headers)");
    }
    Figure("jobs", "Parallel jobs",
           Run->Jobs ? Twine(Run->Jobs) : Twine("one per hardware thread"));
    Figure("wall", "Wall time", formatv("{0:f1} s", Run->WallSeconds));
    OS << "</dl>\n";
  }
  OS << RunFiguresEnd << '\n';
}

} // namespace

StringRef ruleGroup(StringRef Check) {
  for (const auto &[Name, Group] : CheckGroups)
    if (Name == Check)
      return Group;
  return Check.starts_with("clang-diagnostic-") ? "compiler" : "other";
}

void printSummary(PageModel &M, raw_ostream &OS) {
  size_t Errors = llvm::count_if(M.R.Findings, [](const Finding &F) {
    return F.Severity == Level::Error;
  });
  OS << "<section id=\"summary\">\n<h2>Summary</h2>\n<div class=\"cards\">\n";
  printCard("count-findings", M.R.Findings.size(), "findings", OS);
  printCard("count-warnings", M.R.Findings.size() - Errors, "warnings", OS);
  printCard("count-errors", Errors, "errors", OS);
  printCard("count-files", M.FilesWithFindings, "files with findings", OS);
  printCard("count-checks", M.PerCheck.size(), "checks that found something",
            OS);
  printCard("count-tool-errors", M.R.ToolErrors.size(),
            "files not analysed or with compiler errors", OS);
  if (M.R.HasBaseline) {
    printCard("count-new", M.NewCount, "new since the baseline", OS);
    printCard("count-unchanged", M.R.Findings.size() - M.NewCount,
              "also in the baseline", OS);
    printCard("count-absent", M.R.Absent.size(),
              "in the baseline and gone since", OS);
  }
  OS << "</div>\n";
  printCharts(M, OS);
  printByFile(M, OS);
  printToolErrors(M, OS);
  printRunFigures(M, OS);
  OS << "</section>\n";
}

} // namespace torchtidy::html
