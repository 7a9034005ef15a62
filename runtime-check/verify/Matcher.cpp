// The rules that tie a check to the runtime events that prove it.
#include "Matcher.h"

#include "Paths.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

namespace ttv {
namespace {

// One rule per verifiable check: which events are evidence, how many are
// needed, and whether the finding's notes also name lines to look at.
struct Rule {
  const char *check;
  bool (*qualifies)(const Event &);
  uint64_t minCount;
  bool useNotes;
  const char *noun;  // for the evidence text
};

bool pageableAsyncH2D(const Event &e) {
  return e.type == "memcpy" && e.dir == "HtoD" && e.async && e.host == "pageable" &&
         !e.synced;
}
bool unsyncedAsyncD2H(const Event &e) {
  return e.type == "memcpy" && e.dir == "DtoH" && e.async && !e.synced;
}
bool isFree(const Event &e) { return e.type == "free"; }
bool isMismatchThrow(const Event &e) { return e.type == "throw" && e.deviceMismatch; }
bool isHostSync(const Event &e) {
  return e.type == "sync" || (e.type == "memcpy" && !e.async && e.dir == "DtoH");
}

const Rule kRules[] = {
    {"torch-non-blocking-pageable", pageableAsyncH2D, 1, false,
     "async H2D copies from pageable memory with no sync after"},
    {"torch-non-blocking-d2h-race", unsyncedAsyncD2H, 1, true,
     "async D2H copies with no sync after"},
    {"torch-empty-cache-in-loop", isFree, 2, false, "device frees"},
    {"torch-device-mismatch", isMismatchThrow, 1, false, "device-mismatch throws"},
    {"torch-host-sync-in-loop", isHostSync, 2, false, "host-device syncs"},
};

const Rule *ruleFor(const std::string &check) {
  for (const auto &r : kRules)
    if (check == r.check)
      return &r;
  return nullptr;
}

std::vector<std::string> traceFiles(const std::vector<StackLocs> &stacks) {
  std::set<std::string> files;
  for (const auto &s : stacks)
    for (const auto &l : s.user)
      files.insert(l.file);
  return {files.begin(), files.end()};
}

struct Target {
  std::string file;
  int line;
};

bool stackHits(const StackLocs &st, const std::vector<Target> &targets, int slack,
               const PathMatcher &pm) {
  for (const auto &l : st.user)
    for (const auto &t : targets)
      if (l.line >= t.line && l.line <= t.line + slack && pm.matches(l.file, t.file))
        return true;
  return false;
}

std::string evidenceText(const Rule &r, const Evidence &e) {
  std::string s = std::to_string(e.count) + " " + r.noun;
  if (e.bytes)
    s += ", " + formatBytes(e.bytes);
  if (e.timeNs)
    s += ", " + formatNs(e.timeNs) + " host-blocked";
  if (e.gpuNs)
    s += ", " + formatNs(e.gpuNs) + " on the GPU";
  return s;
}

} // namespace

const char *statusName(Status s) {
  switch (s) {
  case Status::Confirmed: return "CONFIRMED";
  case Status::NotObserved: return "NOT OBSERVED";
  case Status::NotReached: return "NOT REACHED";
  case Status::Unverifiable: return "UNVERIFIABLE";
  }
  return "?";
}

bool isVerifiableCheck(const std::string &check) { return ruleFor(check) != nullptr; }

std::string formatBytes(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1ull << 20));
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

std::string formatNs(uint64_t ns) {
  char buf[64];
  if (ns >= 1000000000ull)
    std::snprintf(buf, sizeof buf, "%.2f s", ns / 1e9);
  else if (ns >= 1000000ull)
    std::snprintf(buf, sizeof buf, "%.2f ms", ns / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f us", ns / 1e3);
  return buf;
}

Analysis analyze(const Trace &trace, const std::vector<StackLocs> &stacks,
                 const std::vector<Finding> &findings, const MatchOptions &opts) {
  Analysis a;
  PathMatcher pm(opts.sourceRoot, traceFiles(stacks));
  static const StackLocs kNone;
  auto locsOf = [&](const Event &e) -> const StackLocs & {
    return e.stack >= 0 && static_cast<size_t>(e.stack) < stacks.size() ? stacks[e.stack]
                                                                          : kNone;
  };

  // Totals.
  Totals &t = a.totals;
  for (const auto &e : trace.events) {
    ++t.events;
    if (e.stack >= 0)
      ++t.eventsWithStack;
    if (locsOf(e).site())
      ++t.eventsWithUserFrame;
    if (e.type == "memcpy") {
      ++t.memcpys;
      if (pageableAsyncH2D(e))
        ++t.pageableAsyncH2D;
    } else if (e.type == "free") {
      ++t.frees, t.freeNs += e.durNs;
    } else if (e.type == "alloc") {
      ++t.allocs;
    } else if (e.type == "sync") {
      ++t.syncs, t.syncNs += e.durNs;
    } else if (e.type == "throw") {
      ++t.throws;
    }
  }
  t.peakDeviceBytes = trace.peakDeviceBytes();

  // Findings. `explained[rule]` marks events a finding of that rule covers.
  std::map<const Rule *, std::vector<char>> explained;
  for (const auto &f : findings) {
    FindingResult r;
    r.finding = f;
    const Rule *rule = ruleFor(f.check);
    std::vector<Target> targets{{f.loc.file, f.loc.line}};
    if (rule && rule->useNotes)
      for (const auto &n : f.notes)
        if (!n.file.empty() && n.line > 0)
          targets.push_back({n.file, n.line});
    for (const auto &tg : targets)
      r.lines.push_back(tg.line);
    if (!rule) {
      r.status = Status::Unverifiable;
      r.evidence.text = "not checkable at run time";
      a.results.push_back(std::move(r));
      continue;
    }
    auto &mark = explained[rule];
    mark.resize(trace.events.size());
    Evidence &ev = r.evidence;
    for (size_t i = 0; i < trace.events.size(); ++i) {
      const Event &e = trace.events[i];
      if (!stackHits(locsOf(e), targets, opts.lineSlack, pm))
        continue;
      ++ev.reached;
      if (!rule->qualifies(e))
        continue;
      mark[i] = 1;
      ++ev.count;
      ev.bytes += e.bytes;
      if (e.type != "throw")  // a throw's "duration" is meaningless
        ev.timeNs += e.durNs;
      ev.gpuNs += e.gpuNs;
      if (ev.example.empty() && !e.message.empty())
        ev.example = e.message.substr(0, 200);
    }
    if (ev.count >= rule->minCount) {
      r.status = Status::Confirmed;
      ev.text = evidenceText(*rule, ev);
    } else if (ev.reached) {
      r.status = Status::NotObserved;
      ev.text = "line reached (" + std::to_string(ev.reached) + " events), " +
                std::to_string(ev.count) + " " + rule->noun + " (needs " +
                std::to_string(rule->minCount) + ")";
    } else {
      r.status = Status::NotReached;
      ev.text = "no recorded event at this line";
    }
    a.results.push_back(std::move(r));
  }

  // Runtime-only observations, grouped by rule and first user frame.
  struct Key {
    const Rule *rule;
    std::string file;
    int line;
    bool operator<(const Key &o) const {
      return std::tie(rule, file, line) < std::tie(o.rule, o.file, o.line);
    }
  };
  static const char *const kKinds[] = {"pageable-async-h2d", "unsynced-async-d2h",
                                       "repeated-frees", "device-mismatch-throw",
                                       "repeated-syncs"};
  std::map<Key, Observation> groups;
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const Event &e = trace.events[i];
    for (size_t k = 0; k < std::size(kRules); ++k) {
      const Rule *rule = &kRules[k];
      if (!rule->qualifies(e))
        continue;
      auto ex = explained.find(rule);
      if (ex != explained.end() && ex->second[i])
        continue;
      const SourceLoc *site = locsOf(e).site();
      Key key{rule, site ? site->file : "", site ? site->line : 0};
      Observation &o = groups[key];
      o.kind = kKinds[k];
      o.file = key.file;
      o.line = key.line;
      if (site)
        o.function = site->function;
      ++o.count;
      o.bytes += e.bytes;
      if (e.type != "throw")
        o.timeNs += e.durNs;
    }
  }
  for (auto &[key, o] : groups) {
    if (o.count < key.rule->minCount)
      continue;
    Evidence ev;
    ev.count = o.count, ev.bytes = o.bytes, ev.timeNs = o.timeNs;
    o.text = evidenceText(*key.rule, ev);
    a.observations.push_back(o);
  }
  std::stable_sort(a.observations.begin(), a.observations.end(),
                   [](const Observation &x, const Observation &y) {
                     return x.timeNs > y.timeNs;
                   });
  return a;
}

} // namespace ttv
