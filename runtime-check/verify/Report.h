// The verifier's output: a table for people, JSON for tools, an exit code.
#pragma once

#include "Matcher.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace ttv {

// Exit codes of torch-tidy-verify (docs/runtime-check.md).
enum ExitCode : int {
  kExitOk = 0,           // every verifiable finding CONFIRMED (or none to verify)
  kExitInternal = 1,     // unexpected internal error
  kExitUsage = 2,        // bad command line, unreadable findings or trace
  kExitNotObserved = 3,  // some finding's line ran but showed no evidence
  kExitNotReached = 4,   // some finding's line never ran (and none NOT OBSERVED)
  kExitNoTrace = 5,      // the program ran but no trace was written
};

int exitCodeFor(const Analysis &a);

struct ReportMeta {
  std::vector<std::string> traces;
  std::string findingsPath;
  std::string symbolizer;
  std::vector<std::string> command;  // empty in --trace mode
  int programStatus = -1;            // exit status, 128+signal, -1 if not run
};

void printReport(const Analysis &a, const ReportMeta &meta, FILE *out);
nlohmann::json reportJson(const Analysis &a, const ReportMeta &meta);

} // namespace ttv
