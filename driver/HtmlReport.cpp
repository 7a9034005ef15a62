//===--- HtmlReport.cpp - torch-tidy driver -------------------------------===//
//
// The page's frame: head (CSS, a Content-Security-Policy that allows only
// this page's own style and script, by hash, so nothing is fetched and an
// injected script could not run), summary, filters, the place of the
// findings, the bundled documentation pages, the findings' data, the
// script. See HtmlReport.h.
//
//===----------------------------------------------------------------------===//

#include "HtmlParts.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Base64.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"

// ReportCss and ReportJs: driver/report/report.css and report.js, embedded
// at build time (driver/report/embed.cmake).
#include "HtmlReportResources.inc"

using namespace llvm;

namespace torchtidy::html {

raw_ostream &operator<<(raw_ostream &OS, Escaped E) {
  for (unsigned char C : E.Text) {
    switch (C) {
    case '&':
      OS << "&amp;";
      break;
    case '<':
      OS << "&lt;";
      break;
    case '>':
      OS << "&gt;";
      break;
    case '"':
      OS << "&quot;";
      break;
    case '\'':
      OS << "&#39;";
      break;
    case '\t':
    case '\n':
    case '\r':
      OS << C;
      break;
    default:
      if (C < 0x20 || C == 0x7f)
        OS << "\xEF\xBF\xBD"; // U+FFFD
      else
        OS << C;
    }
  }
  return OS;
}

bool isCompilerError(const Finding &F) {
  return F.Severity == Level::Error &&
         StringRef(F.Check).starts_with("clang-diagnostic-");
}

/// The deepest directory that holds every path, with a trailing separator;
/// "" when it is the root or there are no paths.
static std::string commonDirectory(const std::vector<StringRef> &Paths) {
  std::optional<std::string> Dir;
  for (StringRef P : Paths) {
    if (P.empty())
      continue;
    if (!Dir) {
      Dir = sys::path::parent_path(P).str();
      continue;
    }
    while (!Dir->empty() &&
           !(P.starts_with(*Dir) && P.size() > Dir->size() &&
             sys::path::is_separator(P[Dir->size()])))
      Dir = sys::path::parent_path(*Dir).str();
  }
  if (!Dir || Dir->empty() || sys::path::is_separator(Dir->back()))
    return "";
  return *Dir + sys::path::get_separator().str();
}

PageModel::PageModel(const Report &R, const HtmlOptions &Options)
    : R(R), Options(Options) {
  if (R.HasBaseline)
    for (const Finding &F : R.Findings) {
      IsNew.push_back(!std::binary_search(R.Unchanged.begin(),
                                          R.Unchanged.end(), F));
      NewCount += IsNew.back();
    }
  std::vector<StringRef> All;
  for (const Finding &F : R.Findings) {
    ++PerCheck[F.Check];
    All.push_back(F.Loc.File);
    for (const Note &N : F.Notes)
      All.push_back(N.Loc.File);
    for (const FixReplacement &Fix : F.Fixes)
      All.push_back(Fix.Loc.File);
  }
  for (StringRef File : All)
    FileIndex.emplace(File.str(), 0);
  for (const ToolError &E : R.ToolErrors)
    All.push_back(E.File);
  Root = commonDirectory(All);
  for (auto &[File, Index] : FileIndex) {
    Index = Files.size();
    Files.push_back(File);
  }
  PerFile.assign(Files.size(), 0);
  for (const Finding &F : R.Findings)
    ++PerFile[FileIndex[F.Loc.File]];
  FilesWithFindings = llvm::count_if(PerFile, [](unsigned N) { return N; });
  if (Options.DocsURL.empty() && !Options.DocsDir.empty())
    for (const auto &[Check, Count] : PerCheck) {
      if (!StringRef(Check).starts_with("torch-"))
        continue;
      SmallString<256> Path(Options.DocsDir);
      sys::path::append(Path, Check + ".md");
      if (auto Page = MemoryBuffer::getFile(Path))
        Docs[Check] = (*Page)->getBuffer().str();
    }
}

std::string PageModel::display(StringRef File) const {
  if (!Root.empty() && File.starts_with(Root))
    return File.drop_front(Root.size()).str();
  return File.str();
}

std::string PageModel::docsHref(StringRef Check) const {
  if (Docs.count(Check.str()))
    return "#doc-" + percentEncode(Check);
  if (!Check.starts_with("torch-"))
    return ""; // compiler diagnostics have no page
  if (Options.DocsURL.empty())
    return std::string(DocsBaseURL) + Check.str() + ".md";
  StringRef URL = Options.DocsURL;
  size_t Slot = URL.find("{check}");
  if (Slot == StringRef::npos)
    return URL.str() + Check.str() + ".md";
  return (URL.take_front(Slot) + Check + URL.drop_front(Slot + 7)).str();
}

bool PageModel::changedSince(StringRef File) {
  auto Known = Changed.find(File.str());
  if (Known != Changed.end())
    return Known->second;
  bool Differs = false;
  auto Recorded = R.SourceDigests.find(File.str());
  if (Recorded != R.SourceDigests.end())
    if (std::optional<StringRef> Text = Sources.contents(File))
      Differs = sha256Hex(*Text) != Recorded->second;
  return Changed[File.str()] = Differs;
}

} // namespace torchtidy::html

namespace torchtidy {
using namespace html;

static std::string cspHash(StringRef Text) {
  std::array<uint8_t, 32> Hash = SHA256::hash(arrayRefFromStringRef(Text));
  return "'sha256-" + encodeBase64(Hash) + "'";
}

static void printFilters(PageModel &M, raw_ostream &OS) {
  OS << "<section id=\"filters\" hidden>\n"
     << "<label>Check <select id=\"filter-check\"><option value=\"\">all "
        "checks</option>";
  for (const auto &[Check, Count] : M.PerCheck)
    OS << "<option value=\"" << escaped(Check) << "\">" << escaped(Check)
       << " (" << Count << ")</option>";
  OS << "</select></label>\n<label>File <select id=\"filter-file\">"
        "<option value=\"\">all files</option>";
  for (size_t I = 0; I < M.Files.size(); ++I) {
    if (!M.PerFile[I])
      continue; // a file of notes or fix-its only
    std::string Shown = M.display(M.Files[I]);
    OS << "<option value=\"" << I << "\" data-path=\"" << escaped(Shown)
       << "\">" << escaped(Shown) << " (" << M.PerFile[I] << ")</option>";
  }
  OS << "</select></label>\n";
  if (M.R.HasBaseline)
    OS << "<label><input id=\"filter-new\" type=\"checkbox\"> only new "
          "since the baseline ("
       << M.NewCount << ")</label>\n";
  OS << "<label>Search <input id=\"search\" "
        "type=\"search\" placeholder=\"message, code, path\" "
        "autocomplete=\"off\"></label>\n"
     << "<output id=\"shown\" data-shown=\"" << M.R.Findings.size() << "\">"
     << M.R.Findings.size() << " findings</output>\n</section>\n";
}

static void printDocs(PageModel &M, raw_ostream &OS) {
  OS << "<section id=\"docs\">\n<h2>Check documentation</h2>\n";
  if (M.Docs.empty())
    OS << "<p class=\"muted\">No page is bundled: the checks' names link to "
       << (M.Options.DocsURL.empty() ? "the project's hosted copy"
                                     : "the copy given by --docs-url")
       << ".</p>\n";
  auto LinkFor = [&](StringRef Target) -> std::string {
    if (Target.starts_with("http://") || Target.starts_with("https://"))
      return Target.str();
    StringRef Check = sys::path::filename(Target);
    if (Check.consume_back(".md") && Check.starts_with("torch-"))
      return M.docsHref(Check);
    return "";
  };
  for (const auto &[Check, Page] : M.Docs) {
    OS << "<article class=\"doc\" id=\"doc-" << escaped(Check) << "\">\n";
    printMarkdown(Page, LinkFor, OS);
    OS << "<p><a href=\"#findings\">back to the findings</a></p>\n"
       << "</article>\n";
  }
  OS << "</section>\n";
}

/// With a baseline the page shows the findings it also holds, marked
/// apart from the new ones; the absent ones are only counted.
static Report withUnchanged(const Report &R) {
  Report Shown = R;
  Shown.Findings.insert(Shown.Findings.end(), R.Unchanged.begin(),
                        R.Unchanged.end());
  sortAndUnique(Shown.Findings);
  sortAndUnique(Shown.Unchanged);
  return Shown;
}

void printHTML(const Report &Original, const HtmlOptions &Options,
               raw_ostream &OS) {
  std::optional<Report> Merged;
  if (Original.HasBaseline)
    Merged = withUnchanged(Original);
  const Report &R = Merged ? *Merged : Original;
  PageModel M(R, Options);
  StringRef Css(ReportCss, sizeof(ReportCss) - 1);
  StringRef Js(ReportJs, sizeof(ReportJs) - 1);
  size_t N = R.Findings.size();
  OS << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
     << "<meta charset=\"utf-8\">\n"
     << "<meta name=\"viewport\" content=\"width=device-width, "
        "initial-scale=1\">\n"
     << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src "
        "'none'; img-src data:; style-src "
     << cspHash(Css) << "; script-src " << cspHash(Js) << "\">\n"
     << "<meta name=\"generator\" content=\"torch-tidy " TORCH_TIDY_VERSION
        "\">\n"
     << "<title>torch-tidy report: " << N << " finding"
     << (N == 1 ? "" : "s") << "</title>\n"
     << "<link rel=\"icon\" href=\"data:,\">\n"
     << "<style>" << Css << "</style>\n</head>\n<body>\n";
  OS << "<header class=\"top\">\n<h1>torch-tidy report</h1>\n<p>" << N
     << " finding" << (N == 1 ? "" : "s");
  if (R.HasBaseline)
    OS << " (" << M.NewCount << " new since the baseline)";
  OS << " in " << M.FilesWithFindings
     << " file" << (M.FilesWithFindings == 1 ? "" : "s");
  if (!M.Root.empty())
    OS << " under <code>" << escaped(M.Root) << "</code>";
  OS << "</p>\n<nav><a href=\"#summary\">Summary</a> <a "
        "href=\"#findings\">Findings</a> <a href=\"#docs\">Check "
        "documentation</a></nav>\n</header>\n<main>\n";
  printSummary(M, OS);
  OS << "<section id=\"findings\">\n<h2>Findings</h2>\n";
  printFilters(M, OS);
  if (R.Findings.empty())
    OS << "<p class=\"muted\">No findings.</p>\n";
  else
    OS << "<noscript><p class=\"muted\">The page's script draws the "
          "findings: allow JavaScript to see them (the summary is complete "
          "without it).</p></noscript>\n";
  OS << "<div id=\"finding-list\"></div>\n<p id=\"more\" hidden><button "
        "type=\"button\" id=\"more-button\">Show more</button></p>\n"
     << "<p id=\"no-match\" class=\"muted\" hidden>No finding matches the "
        "filters.</p>\n</section>\n";
  printDocs(M, OS);
  OS << "</main>\n<footer>Made by torch-tidy " TORCH_TIDY_VERSION
        " (<a href=\""
     << ProjectURL << "\">" << ProjectURL
     << "</a>). The source lines were read when this page was made."
        "</footer>\n";
  printFindingData(M, OS);
  OS << "<script>" << Js << "</script>\n</body>\n</html>\n";
}

} // namespace torchtidy
