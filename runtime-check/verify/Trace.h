// The trace the recorder writes (JSON Lines; docs/runtime-check.md), as the
// analyser sees it. Several traces (one per process) load into one Trace:
// module and stack ids are remapped so they stay unique.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ttv {

struct Frame {
  int module = -1;       // index into Trace::modules; -1 = none/unknown
  uint64_t offset = 0;   // return address relative to the module's load bias
  // Pre-symbolised frames (portable fixtures, or after symbolisation):
  std::string file;
  int line = 0;
  std::string function;
  bool presymbolised = false;
};

struct Event {
  std::string type;  // memcpy | free | alloc | sync | throw
  std::string api;
  uint64_t seq = 0, tid = 0, tNs = 0, durNs = 0, bytes = 0, gpuNs = 0;
  uint64_t stream = 0;
  std::string dir = "unknown";   // HtoD | DtoH | DtoD | HtoH | unknown
  std::string host = "unknown";  // pageable | pinned | unknown
  bool async = false, synced = false, deviceMismatch = false;
  std::string exception, message;
  int64_t stack = -1;  // index into Trace::stacks; -1 = no stack recorded
  int process = 0;     // index into Trace::processes
};

struct Process {
  std::string source;  // trace file it came from
  nlohmann::json header = nlohmann::json::object();
  nlohmann::json summary = nlohmann::json::object();
};

struct Trace {
  std::vector<std::string> modules;
  std::vector<std::vector<Frame>> stacks;
  std::vector<Event> events;
  std::vector<Process> processes;

  // Highest peak_device_bytes over the processes (0 when unknown).
  uint64_t peakDeviceBytes() const;
  // Sum of a numeric summary field over the processes.
  uint64_t summarySum(const char *field) const;
};

// Appends the trace in `path` to `into`. On failure returns false and sets
// `err` ("file:line: reason"); `into` may then hold part of the trace.
bool readTraceFile(const std::string &path, Trace &into, std::string &err);

// Same, from text (used by tests); `name` labels error messages.
bool readTraceText(const std::string &text, const std::string &name, Trace &into,
                   std::string &err);

} // namespace ttv
