// torch-tidy-verify: confirms torch-tidy's static findings with what a
// program did on the GPU.
//
//   torch-tidy-verify --findings F.json [--report R.json] -- ./train args...
//   torch-tidy-verify --findings F.json --trace T.jsonl [--trace T2.jsonl]
#include "Findings.h"
#include "Matcher.h"
#include "Report.h"
#include "Runner.h"
#include "Symbolizer.h"
#include "Trace.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

using namespace ttv;

const char kUsage[] =
    "usage: torch-tidy-verify --findings FINDINGS.json [options] -- PROGRAM [ARGS...]\n"
    "       torch-tidy-verify --findings FINDINGS.json --trace TRACE.jsonl [options]\n"
    "\n"
    "Runs PROGRAM with the torch-tidy recorder (libtorch_tidy_rt.so) injected, or\n"
    "reads traces it recorded earlier, and reports for each finding whether the\n"
    "run CONFIRMED it, reached its line without evidence (NOT OBSERVED), or never\n"
    "reached it (NOT REACHED).\n"
    "\n"
    "options:\n"
    "  --findings PATH      torch-tidy --format=json output (required)\n"
    "  --trace PATH         analyse a recorded trace (repeatable; no PROGRAM)\n"
    "  --report PATH        also write the report as JSON\n"
    "  --recorder PATH      libtorch_tidy_rt.so to inject (default: next to this\n"
    "                       program, or ../lib; or $TORCH_TIDY_RECORDER)\n"
    "  --trace-dir DIR      where the run writes its traces (default: a new\n"
    "                       directory under $TMPDIR); old trace.*.jsonl are removed\n"
    "  --source-root DIR    strip DIR from source paths in the trace before\n"
    "                       matching them to the findings' paths\n"
    "  --symbolizer PATH    addr2line, llvm-addr2line or llvm-symbolizer to use\n"
    "  --system-prefix P    treat modules and sources under P as library code\n"
    "                       (repeatable)\n"
    "  --line-slack N       accept evidence up to N lines after a finding's line\n"
    "                       (multi-line statements; default 0)\n"
    "  -q, --quiet          print only the table\n"
    "  -v, --verbose        report symbolizer failures\n"
    "  -h, --help           this text\n"
    "\n"
    "exit status: 0 every verifiable finding CONFIRMED; 3 some NOT OBSERVED;\n"
    "4 some NOT REACHED (none NOT OBSERVED); 5 the program left no trace;\n"
    "2 usage or input error; 1 internal error.\n";

struct Args {
  std::string findings, report, recorder, traceDir, sourceRoot, symbolizer;
  std::vector<std::string> traces, systemPrefixes, command;
  int lineSlack = 0;
  bool quiet = false, verbose = false;
};

int usageError(const std::string &msg) {
  std::fprintf(stderr, "torch-tidy-verify: %s\n%s", msg.c_str(),
               "Try 'torch-tidy-verify --help'.\n");
  return kExitUsage;
}

// Returns -1 on success, else the exit code to return.
int parseArgs(int argc, char **argv, Args &a) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i)
        a.command.push_back(argv[i]);
      break;
    }
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
    if (arg == "-q" || arg == "--quiet") {
      a.quiet = true;
      continue;
    }
    if (arg == "-v" || arg == "--verbose") {
      a.verbose = true;
      continue;
    }
    std::string value;
    size_t eq = arg.find('=');
    std::string name = arg.substr(0, eq);
    auto takesValue = [&](const char *n) { return name == n; };
    static const char *const kValued[] = {"--findings",   "--trace",       "--report",
                                          "--recorder",   "--trace-dir",   "--source-root",
                                          "--symbolizer", "--system-prefix", "--line-slack"};
    bool known = false;
    for (const char *n : kValued)
      known = known || takesValue(n);
    if (!known)
      return usageError("unknown option '" + arg + "'");
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else {
      if (i + 1 >= argc)
        return usageError("option '" + name + "' needs a value");
      value = argv[++i];
    }
    if (name == "--findings") a.findings = value;
    else if (name == "--trace") a.traces.push_back(value);
    else if (name == "--report") a.report = value;
    else if (name == "--recorder") a.recorder = value;
    else if (name == "--trace-dir") a.traceDir = value;
    else if (name == "--source-root") a.sourceRoot = value;
    else if (name == "--symbolizer") a.symbolizer = value;
    else if (name == "--system-prefix") a.systemPrefixes.push_back(value);
    else if (name == "--line-slack") {
      char *end = nullptr;
      long n = std::strtol(value.c_str(), &end, 10);
      if (!end || *end || n < 0 || n > 1000)
        return usageError("--line-slack needs a number from 0 to 1000");
      a.lineSlack = static_cast<int>(n);
    }
  }
  if (a.findings.empty())
    return usageError("--findings is required");
  if (a.traces.empty() && a.command.empty())
    return usageError("give a program after '--', or --trace");
  if (!a.traces.empty() && !a.command.empty())
    return usageError("--trace and a program to run exclude each other");
  return -1;
}

int run(int argc, char **argv) {
  Args args;
  int rc = parseArgs(argc, argv, args);
  if (rc >= 0)
    return rc;

  std::vector<Finding> findings;
  std::string err;
  if (!readFindingsFile(args.findings, findings, err))
    return usageError(err);

  ReportMeta meta;
  meta.findingsPath = args.findings;
  if (!args.command.empty()) {
    RunOptions ro;
    ro.recorder = findRecorder(args.recorder);
    if (ro.recorder.empty())
      return usageError("cannot find libtorch_tidy_rt.so; pass --recorder PATH");
    ro.traceDir = args.traceDir;
    if (!prepareTraceDir(ro.traceDir, err))
      return usageError(err);
    ro.argv = args.command;
    RunResult res;
    if (!runUnderRecorder(ro, res, err))
      return usageError(err);
    meta.command = args.command;
    meta.programStatus = res.status;
    if (!args.quiet)
      std::fprintf(stderr, "torch-tidy-verify: program exited with status %d; traces in %s\n",
                   res.status, ro.traceDir.c_str());
    if (res.traces.empty()) {
      std::fprintf(stderr,
                   "torch-tidy-verify: the program wrote no trace (did it use CUDA? "
                   "is %s loadable?)\n",
                   ro.recorder.c_str());
      return kExitNoTrace;
    }
    args.traces = res.traces;
  }

  Trace trace;
  for (const auto &t : args.traces)
    if (!readTraceFile(t, trace, err))
      return usageError(err);
  meta.traces = args.traces;

  SymbolizerOptions so;
  so.tool = args.symbolizer;
  so.systemPrefixes = args.systemPrefixes;
  so.verbose = args.verbose;
  Symbolizer sym(so);
  if (!args.symbolizer.empty() && sym.tool().empty())
    return usageError("symbolizer not found: " + args.symbolizer);
  if (sym.tool().empty() && !args.quiet)
    std::fprintf(stderr, "torch-tidy-verify: no addr2line/llvm-symbolizer found; only "
                         "pre-symbolised frames will match\n");
  meta.symbolizer = sym.tool();
  std::vector<StackLocs> stacks = sym.resolve(trace);

  MatchOptions mo;
  mo.sourceRoot = args.sourceRoot;
  mo.lineSlack = args.lineSlack;
  Analysis analysis = analyze(trace, stacks, findings, mo);

  printReport(analysis, meta, stdout);
  if (!args.report.empty()) {
    std::ofstream out(args.report);
    out << reportJson(analysis, meta).dump(2, ' ', false,
                                           nlohmann::json::error_handler_t::replace)
        << "\n";
    if (!out)
      return usageError("cannot write " + args.report);
  }
  return exitCodeFor(analysis);
}

} // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "torch-tidy-verify: internal error: %s\n", e.what());
    return kExitInternal;
  }
}
