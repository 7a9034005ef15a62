// Runs the user's program with the recorder injected and collects the traces
// it writes (one per process that used CUDA or threw a c10::Error).
#pragma once

#include <string>
#include <vector>

namespace ttv {

struct RunOptions {
  std::string recorder;  // absolute path of libtorch_tidy_rt.so
  std::string traceDir;  // where traces go; created if missing
  std::vector<std::string> argv;
};

struct RunResult {
  int status = -1;  // exit status, or 128 + signal number
  std::vector<std::string> traces;
};

// Locates libtorch_tidy_rt.so: `explicitPath`, $TORCH_TIDY_RECORDER, next to
// this executable, or in ../lib relative to it. "" when not found.
std::string findRecorder(const std::string &explicitPath);

// Makes `dir` (or a fresh temporary directory when empty) and returns it.
bool prepareTraceDir(std::string &dir, std::string &err);

bool runUnderRecorder(const RunOptions &opts, RunResult &res, std::string &err);

// Trace files (trace.*.jsonl) currently in `dir`, sorted.
std::vector<std::string> listTraces(const std::string &dir);

} // namespace ttv
