//===--- HtmlParts.h - torch-tidy driver ------------------------*- C++ -*-===//
//
// The pieces of the HTML report (HtmlReport.h) shared by its files:
// escaping, the page's model of the findings, the summary, the findings'
// data, the documentation pages.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_HTMLPARTS_H
#define TORCH_TIDY_DRIVER_HTMLPARTS_H

#include "HtmlReport.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace torchtidy::html {

/// `OS << escaped(Text)` writes Text HTML-escaped, for element content and
/// quoted attribute values alike; control characters other than tab and
/// line breaks become U+FFFD.
struct Escaped {
  llvm::StringRef Text;
};
inline Escaped escaped(llvm::StringRef Text) { return {Text}; }
llvm::raw_ostream &operator<<(llvm::raw_ostream &OS, Escaped E);

/// A compiler diagnostic (clang-diagnostic-*) at error level; decided from
/// what JSON and SARIF carry, so that every input gives the same page.
bool isCompilerError(const Finding &F);

/// The catalog's group of a check: "device", "copies", "memory",
/// "compiler" or "other".
llvm::StringRef ruleGroup(llvm::StringRef Check);

/// What the page knows beyond the Report: the files, their current text,
/// whether they changed since the analysis, where each check's page is.
class PageModel {
public:
  PageModel(const Report &R, const HtmlOptions &Options);

  const Report &R;
  const HtmlOptions &Options;
  SourceCache Sources;
  /// The files of the findings, notes and fix-its, sorted; the page
  /// refers to a file by its index here (a finding's `data-file`).
  std::vector<std::string> Files;
  std::map<std::string, unsigned> FileIndex;
  /// Findings per check, per file index.
  std::map<std::string, unsigned> PerCheck;
  std::vector<unsigned> PerFile;
  size_t FilesWithFindings = 0;
  /// With a baseline (R.HasBaseline): R.Findings are the new findings and
  /// those the baseline holds, and IsNew says which is which.
  std::vector<bool> IsNew;
  size_t NewCount = 0;
  /// Checks whose page is bundled, with the page's markdown.
  std::map<std::string, std::string> Docs;

  /// \p File relative to the common directory of all files (Root).
  std::string display(llvm::StringRef File) const;
  std::string Root; // with a trailing separator; "" when there is none
  /// The link to \p Check's page: `#doc-<check>`, the hosted copy, or "".
  std::string docsHref(llvm::StringRef Check) const;
  /// The file's digest differs from the one recorded with the findings.
  bool changedSince(llvm::StringRef File);

private:
  std::map<std::string, bool> Changed;
};

/// The summary: counts, charts, files, tool errors, the run's figures.
void printSummary(PageModel &M, llvm::raw_ostream &OS);
/// The findings as the page's data island, which report.js renders
/// (HtmlFinding.cpp has its schema).
void printFindingData(PageModel &M, llvm::raw_ostream &OS);
/// A documentation page (markdown) as HTML; \p LinkFor maps a link target
/// such as `torch-x.md` to an href, "" to leave the text unlinked.
void printMarkdown(llvm::StringRef Markdown,
                   const std::function<std::string(llvm::StringRef)> &LinkFor,
                   llvm::raw_ostream &OS);

} // namespace torchtidy::html

#endif // TORCH_TIDY_DRIVER_HTMLPARTS_H
