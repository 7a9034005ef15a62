//===--- ReportCommand.cpp - torch-tidy driver ----------------------------===//
//
// `torch-tidy report IN... -o OUT.html [--docs-url=URL]`: the HTML page of
// --format=html from saved findings: torch-tidy's JSON or SARIF (the merge
// of sharded runs included). Several inputs are merged as merge-sarif
// merges shards. The sources are read now; the digests saved with the
// findings tell whether they changed since.
//
//===----------------------------------------------------------------------===//

#include "Explain.h"
#include "HtmlReport.h"
#include "MergeSarif.h"
#include "Messages.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace torchtidy {
namespace {

constexpr const char *Usage =
    "usage: torch-tidy report IN.json|IN.sarif... -o OUT.html "
    "[--docs-url=URL]\n\n"
    "Writes the HTML report of --format=html from the findings that\n"
    "`torch-tidy --format=json` or `--format=sarif` saved (several inputs,\n"
    "e.g. the shards of an audit, are merged). OUT may be '-' (stdout).\n\n"
    "  -o OUT          the page to write\n"
    "  --docs-url=URL  link the checks' pages at URL<check>.md (or URL with\n"
    "                  {check} replaced) instead of bundling them\n";

Expected<Report> readFindings(StringRef Path) {
  Expected<json::Value> Document = readJSONFile(Path);
  if (!Document)
    return Document.takeError();
  const json::Object *O = Document->getAsObject();
  if (O && O->get("runs"))
    return fromSARIFDocument(*Document, Path, "report");
  if (O && O->get("findings"))
    return fromJSONDocument(*Document, Path);
  return createStringError(inconvertibleErrorCode(),
                           "'" + Path +
                               "' is neither torch-tidy's JSON "
                               "(--format=json) nor its SARIF "
                               "(--format=sarif)");
}

} // namespace

int reportMain(ArrayRef<const char *> Args, const char *Argv0) {
  std::string Output;
  HtmlOptions Options;
  std::vector<std::string> Inputs;
  for (size_t I = 0; I < Args.size(); ++I) {
    StringRef Arg = Args[I];
    auto Value = [&](StringRef Name, std::string &Out) {
      if (Arg == Name && I + 1 < Args.size()) {
        Out = Args[++I];
        return true;
      }
      if (Arg.consume_front(Name.str() + "=")) {
        Out = Arg.str();
        return true;
      }
      return false;
    };
    if (Arg == "--help" || Arg == "-h") {
      outs() << Usage;
      return 0;
    }
    if (Value("-o", Output) || Value("--docs-url", Options.DocsURL))
      continue;
    if (Arg == "-o" || Arg == "--docs-url") {
      printError("report: " + Arg + " needs a value");
      return 2;
    }
    if (Arg.starts_with("-") && Arg != "-") {
      printError("report: unknown option '" + Arg +
                 "' (torch-tidy report IN... -o OUT.html [--docs-url=URL])");
      return 2;
    }
    Inputs.push_back(Arg.str());
  }
  if (Output.empty() || Inputs.empty()) {
    printError("report needs an output and at least one input (torch-tidy "
               "report IN.json|IN.sarif... -o OUT.html)");
    return 2;
  }
  std::vector<Report> Reports;
  for (const std::string &Input : Inputs) {
    Expected<Report> R = readFindings(Input);
    if (!R) {
      printError(toString(R.takeError()));
      return 2;
    }
    Reports.push_back(std::move(*R));
    Options.Inputs += (Options.Inputs.empty() ? "" : ", ") + Input;
  }
  Report Merged = mergeReports(Reports);
  Options.DocsDir = findDocsDir(Argv0);
  if (Error E = writeToOutput(Output, [&](raw_ostream &OS) {
        printHTML(Merged, Options, OS);
        return Error::success();
      })) {
    printError("cannot write '" + Output + "': " + toString(std::move(E)));
    return 2;
  }
  return 0;
}

} // namespace torchtidy
