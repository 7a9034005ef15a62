// Event store, stack capture and the JSON Lines writer. See Recorder.h.
#include "Recorder.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <execinfo.h>
#include <fstream>
#include <link.h>
#include <mutex>
#include <sys/syscall.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace ttrt {
namespace {

using json = nlohmann::json;

uint64_t envU64(const char *name, uint64_t dflt) {
  const char *v = std::getenv(name);
  if (!v || !*v)
    return dflt;
  char *end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 10);
  return (end && *end == '\0') ? x : dflt;
}

const auto gStart = std::chrono::steady_clock::now();

struct Store {
  std::mutex mu;
  std::vector<Event> events;
  std::vector<std::string> messages;  // id = index + 1
  uint64_t dropped = 0;
  bool cupti = false, activity = false, alwaysWrite = false;

  std::mutex stackMu;
  std::vector<std::vector<uintptr_t>> stacks;
  std::unordered_map<uint64_t, std::vector<uint32_t>> stackIndex;
  std::atomic<uint64_t> unwinds{0};
  std::atomic<uint64_t> sampledOut{0};

  std::mutex allocMu;
  std::unordered_map<uint64_t, uint64_t> live;
  uint64_t curBytes = 0, peakBytes = 0;

  std::mutex actMu;
  std::vector<CopyActivity> activities;

  std::atomic<bool> written{false};
  void (*flushHook)() = nullptr;
};

Store &store() {
  static Store *s = new Store();  // never destroyed: used from atexit paths
  return *s;
}

thread_local int64_t tLastCopy = -1;

uint64_t hashFrames(const uintptr_t *f, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; ++i) {
    h ^= static_cast<uint64_t>(f[i]);
    h *= 1099511628211ull;
  }
  return h;
}

struct Module {
  std::string path;
  uintptr_t bias = 0;
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
};

std::string selfExe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0)
    return "";
  buf[n] = '\0';
  return buf;
}

int collectModule(struct dl_phdr_info *info, size_t, void *data) {
  auto *mods = static_cast<std::vector<Module> *>(data);
  Module m;
  m.path = (info->dlpi_name && *info->dlpi_name) ? info->dlpi_name : "";
  if (m.path.empty() && mods->empty())
    m.path = selfExe();  // the first entry without a name is the executable
  m.bias = info->dlpi_addr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto &ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD)
      m.ranges.push_back({info->dlpi_addr + ph.p_vaddr,
                          info->dlpi_addr + ph.p_vaddr + ph.p_memsz});
  }
  if (!m.path.empty() && !m.ranges.empty())
    mods->push_back(std::move(m));
  return 0;
}

std::vector<std::string> cmdline() {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string arg;
  while (std::getline(in, arg, '\0'))
    out.push_back(arg);
  return out;
}

std::string dumpLine(const json &j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace

std::string apiBaseName(const char *name) {
  std::string n = name ? name : "";
  size_t v = n.rfind("_v");
  if (v != std::string::npos && v + 2 < n.size() &&
      n.find_first_not_of("0123456789", v + 2) == std::string::npos)
    n.erase(v);
  for (const char *suffix : {"_ptsz", "_ptds"}) {
    size_t pos = n.rfind(suffix);
    if (pos != std::string::npos && pos + std::strlen(suffix) == n.size())
      n.erase(pos);
  }
  return n;
}

const char *dirName(Dir d) {
  switch (d) {
  case Dir::HtoD: return "HtoD";
  case Dir::DtoH: return "DtoH";
  case Dir::DtoD: return "DtoD";
  case Dir::HtoH: return "HtoH";
  default: return "unknown";
  }
}

const char *hostName(HostKind h) {
  switch (h) {
  case HostKind::Pageable: return "pageable";
  case HostKind::Pinned: return "pinned";
  default: return "unknown";
  }
}

std::string resolveTracePath(const std::string &pattern) {
  std::string pid = std::to_string(static_cast<long>(getpid()));
  if (pattern.empty())
    return "torch-tidy-trace." + pid + ".jsonl";
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') {
      out += pid;
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

Config &mutableConfig() {
  static Config cfg = [] {
    Config c;
    const char *p = std::getenv("TORCH_TIDY_TRACE");
    c.tracePath = resolveTracePath(p ? p : "");
    c.stackDepth = static_cast<int>(
        std::min<uint64_t>(envU64("TORCH_TIDY_STACK_DEPTH", 96), 256));
    c.maxEvents = envU64("TORCH_TIDY_MAX_EVENTS", c.maxEvents);
    c.fullStacks = envU64("TORCH_TIDY_FULL_STACKS", c.fullStacks);
    c.sampleEvery = std::max<uint64_t>(1, envU64("TORCH_TIDY_SAMPLE_EVERY", 64));
    c.pointerAttr = envU64("TORCH_TIDY_NO_PTR_ATTR", 0) == 0;
    return c;
  }();
  return cfg;
}

const Config &config() { return mutableConfig(); }

void setTracePath(const std::string &path) { mutableConfig().tracePath = path; }

uint64_t nowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now() - gStart)
          .count());
}

uint64_t threadId() {
  thread_local uint64_t tid = static_cast<uint64_t>(syscall(SYS_gettid));
  return tid;
}

uint32_t captureStack(int skip) {
  Store &s = store();
  const Config &c = config();
  uint64_t n = s.unwinds.fetch_add(1, std::memory_order_relaxed);
  if (n >= c.fullStacks && (n % c.sampleEvery) != 0) {
    s.sampledOut.fetch_add(1, std::memory_order_relaxed);
    return kNoStack;
  }
  void *buf[256 + 8];
  int want = std::min(c.stackDepth + skip + 1, 256 + 8);
  int got = backtrace(buf, want);
  int first = std::min(got, skip + 1);  // drop captureStack and `skip` callers
  int count = got - first;
  if (count <= 0)
    return kNoStack;
  auto *frames = reinterpret_cast<uintptr_t *>(buf + first);
  uint64_t h = hashFrames(frames, count);
  std::lock_guard<std::mutex> g(s.stackMu);
  auto &bucket = s.stackIndex[h];
  for (uint32_t id : bucket) {
    const auto &st = s.stacks[id];
    if (st.size() == static_cast<size_t>(count) &&
        std::equal(st.begin(), st.end(), frames))
      return id;
  }
  uint32_t id = static_cast<uint32_t>(s.stacks.size());
  s.stacks.emplace_back(frames, frames + count);
  bucket.push_back(id);
  return id;
}

int64_t addEvent(Event ev) {
  Store &s = store();
  if (ev.tid == 0)
    ev.tid = threadId();
  std::lock_guard<std::mutex> g(s.mu);
  if (ev.kind == EvKind::Sync && tLastCopy >= 0 &&
      static_cast<size_t>(tLastCopy) < s.events.size())
    s.events[tLastCopy].synced = true;
  if (s.events.size() >= config().maxEvents) {
    ++s.dropped;
    tLastCopy = -1;
    return -1;
  }
  int64_t idx = static_cast<int64_t>(s.events.size());
  s.events.push_back(ev);
  tLastCopy = ev.kind == EvKind::Memcpy ? idx : -1;
  return idx;
}

void breakSyncChain() { tLastCopy = -1; }

uint32_t addMessage(const std::string &msg) {
  Store &s = store();
  std::lock_guard<std::mutex> g(s.mu);
  s.messages.push_back(msg.substr(0, 2000));
  return static_cast<uint32_t>(s.messages.size());
}

void noteAlloc(uint64_t key, uint64_t bytes) {
  Store &s = store();
  std::lock_guard<std::mutex> g(s.allocMu);
  auto it = s.live.find(key);
  if (it != s.live.end())
    s.curBytes -= it->second;
  s.live[key] = bytes;
  s.curBytes += bytes;
  s.peakBytes = std::max(s.peakBytes, s.curBytes);
}

uint64_t noteFree(uint64_t key) {
  Store &s = store();
  std::lock_guard<std::mutex> g(s.allocMu);
  auto it = s.live.find(key);
  if (it == s.live.end())
    return 0;
  uint64_t b = it->second;
  s.curBytes -= b;
  s.live.erase(it);
  return b;
}

void addCopyActivity(const CopyActivity &a) {
  Store &s = store();
  std::lock_guard<std::mutex> g(s.actMu);
  s.activities.push_back(a);
}

void setCuptiState(bool cupti, bool activity) {
  Store &s = store();
  std::lock_guard<std::mutex> g(s.mu);
  s.cupti = cupti;
  s.activity = activity;
}

void setFlushHook(void (*fn)()) { store().flushHook = fn; }
void setAlwaysWrite(bool on) { store().alwaysWrite = on; }

void resetForTesting() {
  Store &s = store();
  {
    std::lock_guard<std::mutex> g(s.mu);
    s.events.clear();
    s.messages.clear();
    s.dropped = 0;
  }
  {
    std::lock_guard<std::mutex> g(s.stackMu);
    s.stacks.clear();
    s.stackIndex.clear();
    s.unwinds = 0;
    s.sampledOut = 0;
  }
  {
    std::lock_guard<std::mutex> g(s.allocMu);
    s.live.clear();
    s.curBytes = s.peakBytes = 0;
  }
  {
    std::lock_guard<std::mutex> g(s.actMu);
    s.activities.clear();
  }
  tLastCopy = -1;
  s.written = false;
}

namespace {

// Applies the activity record matching `ev` (by runtime, then driver
// correlation id) to the event.
void joinActivity(Event &ev, uint64_t &gpuNs,
                  const std::unordered_map<uint32_t, const CopyActivity *> &byRt,
                  const std::unordered_map<uint32_t, const CopyActivity *> &byDrv) {
  const CopyActivity *a = nullptr;
  auto find = [](const auto &m, uint32_t k) -> const CopyActivity * {
    if (!k)
      return nullptr;
    auto it = m.find(k);
    return it == m.end() ? nullptr : it->second;
  };
  a = find(byRt, ev.corrRuntime);
  if (!a)
    a = find(byDrv, ev.corrDriver);
  if (!a)
    a = find(byDrv, ev.corrRuntime);
  if (!a)
    return;
  if (ev.dir == Dir::Unknown)
    ev.dir = a->dir;
  if (!ev.bytes)
    ev.bytes = a->bytes;
  if (a->host != HostKind::Unknown) {
    ev.host = a->host;
    ev.hostSource = HostSource::Activity;
  }
  gpuNs = a->endNs > a->startNs ? a->endNs - a->startNs : 0;
}

const char *kindName(EvKind k) {
  switch (k) {
  case EvKind::Memcpy: return "memcpy";
  case EvKind::Free: return "free";
  case EvKind::Alloc: return "alloc";
  case EvKind::Sync: return "sync";
  case EvKind::Throw: return "throw";
  }
  return "unknown";
}

} // namespace

bool writeTrace(const char *reason) {
  Store &s = store();
  if (s.written.exchange(true))
    return false;
  if (s.flushHook)
    s.flushHook();

  std::unique_lock<std::mutex> g(s.mu, std::defer_lock);
  bool emergency = std::strcmp(reason, "signal") == 0;
  if (emergency) {
    if (!g.try_lock())
      return false;
  } else {
    g.lock();
  }
  if (!s.alwaysWrite && !s.cupti && s.events.empty())
    return false;
  std::lock_guard<std::mutex> gs(s.stackMu);
  std::lock_guard<std::mutex> ga(s.actMu);

  std::unordered_map<uint32_t, const CopyActivity *> byRt, byDrv;
  for (const auto &a : s.activities) {
    if (a.corrRuntime)
      byRt[a.corrRuntime] = &a;
    if (a.corr)
      byDrv[a.corr] = &a;
  }

  std::vector<Module> mods;
  dl_iterate_phdr(collectModule, &mods);
  std::vector<int> modId(mods.size(), -1);
  std::vector<std::string> modLines;
  auto locate = [&](uintptr_t addr, int &mid, uint64_t &off) {
    for (size_t i = 0; i < mods.size(); ++i)
      for (const auto &r : mods[i].ranges)
        if (addr >= r.first && addr < r.second) {
          if (modId[i] < 0) {
            modId[i] = static_cast<int>(modLines.size());
            modLines.push_back(dumpLine({{"type", "module"},
                                         {"id", modId[i]},
                                         {"path", mods[i].path},
                                         {"base", mods[i].bias}}));
          }
          mid = modId[i];
          off = addr - mods[i].bias;
          return;
        }
    mid = -1;
    off = addr;
  };
  std::vector<std::string> stackLines;
  stackLines.reserve(s.stacks.size());
  for (size_t i = 0; i < s.stacks.size(); ++i) {
    json frames = json::array();
    for (uintptr_t a : s.stacks[i]) {
      int mid;
      uint64_t off;
      locate(a, mid, off);
      frames.push_back({mid, off});
    }
    stackLines.push_back(dumpLine(
        {{"type", "stack"}, {"id", i}, {"frames", std::move(frames)}}));
  }

  FILE *f = std::fopen(config().tracePath.c_str(), "w");
  if (!f)
    return false;
  auto put = [&](const std::string &line) {
    std::fwrite(line.data(), 1, line.size(), f);
    std::fputc('\n', f);
  };
  put(dumpLine({{"type", "header"},
                {"version", 1},
                {"tool", "torch-tidy-rt"},
                {"pid", static_cast<long>(getpid())},
                {"exe", selfExe()},
                {"cmdline", cmdline()},
                {"time", static_cast<long long>(std::time(nullptr))},
                {"cupti", s.cupti},
                {"activity", s.activity},
                {"stack_depth", config().stackDepth}}));
  for (const auto &l : modLines)
    put(l);
  for (const auto &l : stackLines)
    put(l);

  uint64_t counts[5] = {0, 0, 0, 0, 0}, times[5] = {0, 0, 0, 0, 0};
  uint64_t freedBytes = 0, copyBytes = 0;
  for (size_t i = 0; i < s.events.size(); ++i) {
    Event ev = s.events[i];
    uint64_t gpuNs = 0;
    json j = {{"type", kindName(ev.kind)}, {"seq", i},       {"tid", ev.tid},
              {"t_ns", ev.tNs},            {"dur_ns", ev.durNs}, {"api", ev.api}};
    switch (ev.kind) {
    case EvKind::Memcpy:
      joinActivity(ev, gpuNs, byRt, byDrv);
      j["dir"] = dirName(ev.dir);
      j["bytes"] = ev.bytes;
      j["async"] = ev.async;
      j["stream"] = ev.stream;
      j["host"] = hostName(ev.host);
      j["host_source"] = ev.hostSource == HostSource::Activity      ? "activity"
                         : ev.hostSource == HostSource::PointerAttr ? "attr"
                                                                    : "none";
      j["synced"] = ev.synced;
      if (gpuNs)
        j["gpu_ns"] = gpuNs;
      copyBytes += ev.bytes;
      break;
    case EvKind::Free:
      freedBytes += ev.bytes;
      j["bytes"] = ev.bytes;
      break;
    case EvKind::Alloc:
      j["bytes"] = ev.bytes;
      break;
    case EvKind::Sync:
      j["stream"] = ev.stream;
      break;
    case EvKind::Throw:
      if (ev.typeName && ev.typeName <= s.messages.size())
        j["exception"] = s.messages[ev.typeName - 1];
      if (ev.message && ev.message <= s.messages.size())
        j["message"] = s.messages[ev.message - 1];
      j["device_mismatch"] = ev.deviceMismatch;
      break;
    }
    if (ev.stack != kNoStack)
      j["stack"] = ev.stack;
    counts[static_cast<int>(ev.kind)]++;
    times[static_cast<int>(ev.kind)] += ev.durNs;
    put(dumpLine(j));
  }
  uint64_t peak;
  {
    std::lock_guard<std::mutex> gl(s.allocMu);
    peak = s.peakBytes;
  }
  put(dumpLine({{"type", "summary"},
                {"reason", reason},
                {"events", s.events.size()},
                {"dropped_events", s.dropped},
                {"stacks", s.stacks.size()},
                {"unwinds", s.unwinds.load()},
                {"stacks_sampled_out", s.sampledOut.load()},
                {"memcpy_count", counts[0]},
                {"memcpy_bytes", copyBytes},
                {"free_count", counts[1]},
                {"free_ns", times[1]},
                {"freed_bytes", freedBytes},
                {"alloc_count", counts[2]},
                {"sync_count", counts[3]},
                {"sync_ns", times[3]},
                {"throw_count", counts[4]},
                {"activity_records", s.activities.size()},
                {"peak_device_bytes", peak},
                {"wall_ns", nowNs()}}));
  bool ok = std::fflush(f) == 0;
  ok = std::fclose(f) == 0 && ok;
  return ok;
}

} // namespace ttrt
