#include "Report.h"

#include <algorithm>

namespace ttv {
namespace {

using json = nlohmann::json;

std::string where(const std::string &file, int line) {
  if (file.empty())
    return "(no user frame)";
  return file + ":" + std::to_string(line);
}

size_t count(const Analysis &a, Status s) {
  return static_cast<size_t>(std::count_if(a.results.begin(), a.results.end(),
                                           [&](const FindingResult &r) { return r.status == s; }));
}

} // namespace

int exitCodeFor(const Analysis &a) {
  if (count(a, Status::NotObserved))
    return kExitNotObserved;
  if (count(a, Status::NotReached))
    return kExitNotReached;
  return kExitOk;
}

void printReport(const Analysis &a, const ReportMeta &meta, FILE *out) {
  size_t wCheck = 5, wLoc = 8;
  for (const auto &r : a.results) {
    wCheck = std::max(wCheck, r.finding.check.size());
    wLoc = std::max(wLoc, where(r.finding.loc.file, r.finding.loc.line).size());
  }
  std::fprintf(out, "torch-tidy-verify: %zu finding(s), %zu trace(s)\n\n", a.results.size(),
               meta.traces.size());
  if (!a.results.empty()) {
    std::fprintf(out, "%-13s %-*s %-*s %s\n", "STATUS", int(wCheck), "CHECK", int(wLoc),
                 "LOCATION", "EVIDENCE");
    for (const auto &r : a.results) {
      std::fprintf(out, "%-13s %-*s %-*s %s\n", statusName(r.status), int(wCheck),
                   r.finding.check.c_str(), int(wLoc),
                   where(r.finding.loc.file, r.finding.loc.line).c_str(),
                   r.evidence.text.c_str());
      if (!r.evidence.example.empty())
        std::fprintf(out, "%-13s %-*s   \"%s\"\n", "", int(wCheck), "",
                     r.evidence.example.c_str());
    }
  }
  if (!a.observations.empty()) {
    std::fprintf(out, "\nRuntime-only observations (no finding explains them):\n");
    for (const auto &o : a.observations)
      std::fprintf(out, "  %-22s %s  %s\n", o.kind.c_str(), where(o.file, o.line).c_str(),
                   o.text.c_str());
  }
  const Totals &t = a.totals;
  std::fprintf(out,
               "\nPeak device memory: %s. Events: %llu (%llu with a user frame); copies %llu, "
               "frees %llu (%s), allocations %llu, syncs %llu (%s), throws %llu.\n",
               t.peakDeviceBytes ? formatBytes(t.peakDeviceBytes).c_str() : "unknown",
               (unsigned long long)t.events, (unsigned long long)t.eventsWithUserFrame,
               (unsigned long long)t.memcpys, (unsigned long long)t.frees,
               formatNs(t.freeNs).c_str(), (unsigned long long)t.allocs,
               (unsigned long long)t.syncs, formatNs(t.syncNs).c_str(),
               (unsigned long long)t.throws);
  std::fprintf(out, "Summary: %zu confirmed, %zu not observed, %zu not reached, %zu unverifiable.\n",
               count(a, Status::Confirmed), count(a, Status::NotObserved),
               count(a, Status::NotReached), count(a, Status::Unverifiable));
}

json reportJson(const Analysis &a, const ReportMeta &meta) {
  json findings = json::array();
  for (const auto &r : a.results) {
    json notes = json::array();
    for (const auto &n : r.finding.notes)
      notes.push_back({{"file", n.file}, {"line", n.line}, {"message", n.message}});
    findings.push_back({{"check", r.finding.check},
                        {"file", r.finding.loc.file},
                        {"line", r.finding.loc.line},
                        {"column", r.finding.loc.column},
                        {"message", r.finding.loc.message},
                        {"status", statusName(r.status)},
                        {"lines_checked", r.lines},
                        {"evidence",
                         {{"count", r.evidence.count},
                          {"bytes", r.evidence.bytes},
                          {"host_blocked_ns", r.evidence.timeNs},
                          {"gpu_ns", r.evidence.gpuNs},
                          {"events_at_line", r.evidence.reached},
                          {"text", r.evidence.text},
                          {"example", r.evidence.example}}}});
  }
  json obs = json::array();
  for (const auto &o : a.observations)
    obs.push_back({{"kind", o.kind},
                   {"file", o.file},
                   {"line", o.line},
                   {"function", o.function},
                   {"count", o.count},
                   {"bytes", o.bytes},
                   {"host_blocked_ns", o.timeNs},
                   {"text", o.text}});
  const Totals &t = a.totals;
  json counts = {{"CONFIRMED", count(a, Status::Confirmed)},
                 {"NOT OBSERVED", count(a, Status::NotObserved)},
                 {"NOT REACHED", count(a, Status::NotReached)},
                 {"UNVERIFIABLE", count(a, Status::Unverifiable)}};
  json j = {{"version", 1},
            {"tool", "torch-tidy-verify"},
            {"findings_file", meta.findingsPath},
            {"traces", meta.traces},
            {"symbolizer", meta.symbolizer},
            {"findings", findings},
            {"observations", obs},
            {"counts", counts},
            {"totals",
             {{"events", t.events},
              {"events_with_stack", t.eventsWithStack},
              {"events_with_user_frame", t.eventsWithUserFrame},
              {"memcpy", t.memcpys},
              {"pageable_async_h2d", t.pageableAsyncH2D},
              {"frees", t.frees},
              {"free_ns", t.freeNs},
              {"allocs", t.allocs},
              {"syncs", t.syncs},
              {"sync_ns", t.syncNs},
              {"throws", t.throws}}},
            {"peak_device_bytes", t.peakDeviceBytes},
            {"exit_code", exitCodeFor(a)}};
  if (!meta.command.empty()) {
    j["command"] = meta.command;
    j["program_status"] = meta.programStatus;
  }
  return j;
}

} // namespace ttv
