// Matches runtime evidence to static findings, line by line, and collects the
// runtime-only observations no finding explains.
#pragma once

#include "Findings.h"
#include "Symbolizer.h"
#include "Trace.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ttv {

enum class Status { Confirmed, NotObserved, NotReached, Unverifiable };
const char *statusName(Status s);

struct Evidence {
  uint64_t count = 0;     // qualifying events at the finding's line(s)
  uint64_t bytes = 0;
  uint64_t timeNs = 0;    // host time lost in those calls
  uint64_t gpuNs = 0;     // device time of the copies (activity records)
  uint64_t reached = 0;   // events of any kind at the line(s)
  std::string text;       // one-line human summary
  std::string example;    // e.g. the exception message
};

struct FindingResult {
  Finding finding;
  Status status = Status::Unverifiable;
  Evidence evidence;
  std::vector<int> lines;  // the lines evidence was looked for at
};

struct Observation {
  std::string kind;  // pageable-async-h2d | unsynced-async-d2h | device-mismatch-throw
                     // | repeated-frees | repeated-syncs
  std::string file;  // "" when no user frame was recorded
  int line = 0;
  std::string function;
  uint64_t count = 0, bytes = 0, timeNs = 0;
  std::string text;
};

struct Totals {
  uint64_t memcpys = 0, pageableAsyncH2D = 0, frees = 0, freeNs = 0, allocs = 0;
  uint64_t syncs = 0, syncNs = 0, throws = 0, events = 0, eventsWithStack = 0;
  uint64_t eventsWithUserFrame = 0, peakDeviceBytes = 0;
};

struct Analysis {
  std::vector<FindingResult> results;
  std::vector<Observation> observations;
  Totals totals;
};

struct MatchOptions {
  std::string sourceRoot;
  int lineSlack = 0;  // accept evidence this many lines after the finding's line
};

// Whether torch-tidy-verify knows how to confirm this check at run time.
bool isVerifiableCheck(const std::string &check);

Analysis analyze(const Trace &trace, const std::vector<StackLocs> &stacks,
                 const std::vector<Finding> &findings, const MatchOptions &opts);

// Human-readable sizes and durations ("12.0 MiB", "3.41 ms").
std::string formatBytes(uint64_t b);
std::string formatNs(uint64_t ns);

} // namespace ttv
