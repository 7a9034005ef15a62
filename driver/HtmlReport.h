//===--- HtmlReport.h - torch-tidy driver -----------------------*- C++ -*-===//
//
// --format=html and `torch-tidy report`: one self-contained HTML page for
// the person who decides what to fix first. Inline CSS and a little inline
// JavaScript (driver/report/), no external fetch (a Content-Security-Policy
// forbids it), every text HTML-escaped. A summary (counts by rule group and
// check as an SVG chart, by file, the files that did not compile, the run's
// own figures), then each finding in its source, read when the page is made,
// with the warning and its notes as numbered steps and the fix-it as a diff,
// and the checks' documentation pages bundled at the end.
//
// The page is a function of the findings, the sources and the docs, except
// for one delimited element with the run's figures (RunFigures): see
// docs/driver.md.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_HTMLREPORT_H
#define TORCH_TIDY_DRIVER_HTMLREPORT_H

#include "Audit.h"
#include "OutputFormats.h"
#include <optional>
#include <string>

namespace torchtidy {

/// What a run knows about itself and saved findings do not record.
struct RunFigures {
  unsigned TranslationUnits = 0;
  unsigned Jobs = 0; // 0: one per hardware thread
  double WallSeconds = 0;
  std::optional<AuditStats> Audit; // with --audit
};

struct HtmlOptions {
  /// docs/checks pages to bundle, `<DocsDir>/<check>.md` ("" for none).
  std::string DocsDir;
  /// A hosted copy of the pages: links go to `<DocsURL><check>.md`, or to
  /// DocsURL with `{check}` replaced, and no page is bundled.
  std::string DocsURL;
  /// The run's figures, for --format=html; without them (a page made from
  /// saved findings) the page names \p Inputs instead.
  std::optional<RunFigures> Figures;
  std::string Inputs;
};

/// Writes the page. Deterministic in R, the files' contents and the docs,
/// apart from the element between the RunFiguresBegin/End comments.
void printHTML(const Report &R, const HtmlOptions &Options,
               llvm::raw_ostream &OS);

/// The comments around the run-dependent element, each on a line of its own
/// (`sed '/BEGIN/,/END/d'` removes it).
inline constexpr const char *RunFiguresBegin =
    "<!-- torch-tidy: run-dependent figures: begin -->";
inline constexpr const char *RunFiguresEnd =
    "<!-- torch-tidy: run-dependent figures: end -->";

/// `torch-tidy report IN... -o OUT`; Args follow `report`. Returns the exit
/// status (0, or 2 after a one-line error).
int reportMain(llvm::ArrayRef<const char *> Args, const char *Argv0);

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_HTMLREPORT_H
