// TraceReader: parses the recorder's JSON Lines trace.
#include "Trace.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace ttv {
namespace {

using json = nlohmann::json;

uint64_t toU64(const json &v) {
  if (v.is_number_unsigned())
    return v.get<uint64_t>();
  if (v.is_number_integer())
    return static_cast<uint64_t>(std::max<int64_t>(0, v.get<int64_t>()));
  if (v.is_number_float())
    return static_cast<uint64_t>(std::max(0.0, v.get<double>()));
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    size_t pos = 0;
    uint64_t x = std::stoull(s, &pos, 0);  // accepts "0x..." and decimal
    if (pos != s.size())
      throw std::invalid_argument("not a number: " + s);
    return x;
  }
  throw std::invalid_argument("expected a number");
}

uint64_t getU64(const json &o, const char *key, uint64_t dflt = 0) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? dflt : toU64(*it);
}

std::string getStr(const json &o, const char *key, const std::string &dflt = "") {
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : dflt;
}

bool getBool(const json &o, const char *key) {
  auto it = o.find(key);
  return it != o.end() && it->is_boolean() && it->get<bool>();
}

struct Loader {
  Trace &t;
  int process;
  std::map<int64_t, int> moduleIds;     // trace-local -> global
  std::map<int64_t, int64_t> stackIds;  // trace-local -> global

  int moduleByPath(const std::string &path) {
    auto it = std::find(t.modules.begin(), t.modules.end(), path);
    if (it != t.modules.end())
      return static_cast<int>(it - t.modules.begin());
    t.modules.push_back(path);
    return static_cast<int>(t.modules.size() - 1);
  }

  Frame frame(const json &f) {
    Frame fr;
    if (f.is_array()) {  // [module id, offset]
      if (f.size() != 2)
        throw std::invalid_argument("frame must be [module, offset]");
      int64_t local = f[0].get<int64_t>();
      auto it = moduleIds.find(local);
      fr.module = it == moduleIds.end() ? -1 : it->second;
      fr.offset = toU64(f[1]);
      return fr;
    }
    if (!f.is_object())
      throw std::invalid_argument("frame must be an array or an object");
    if (auto m = f.find("module"); m != f.end()) {
      if (m->is_string()) {
        fr.module = moduleByPath(m->get<std::string>());
      } else {
        auto it = moduleIds.find(m->get<int64_t>());
        fr.module = it == moduleIds.end() ? -1 : it->second;
      }
    }
    fr.offset = getU64(f, "offset");
    fr.file = getStr(f, "file");
    fr.line = static_cast<int>(getU64(f, "line"));
    fr.function = getStr(f, "function");
    fr.presymbolised = !fr.file.empty() && fr.line > 0;
    return fr;
  }

  void line(const json &j) {
    if (!j.is_object())
      throw std::invalid_argument("each line must be a JSON object");
    const std::string type = getStr(j, "type");
    if (type.empty())
      throw std::invalid_argument("missing \"type\"");
    Process &proc = t.processes[process];
    if (type == "header") {
      if (getU64(j, "version", 1) != 1)
        throw std::invalid_argument("unsupported trace version");
      proc.header = j;
    } else if (type == "module") {
      int64_t id = static_cast<int64_t>(getU64(j, "id"));
      moduleIds[id] = moduleByPath(getStr(j, "path"));
    } else if (type == "stack") {
      int64_t id = static_cast<int64_t>(getU64(j, "id"));
      std::vector<Frame> frames;
      for (const auto &f : j.at("frames"))
        frames.push_back(frame(f));
      t.stacks.push_back(std::move(frames));
      stackIds[id] = static_cast<int64_t>(t.stacks.size() - 1);
    } else if (type == "summary") {
      proc.summary = j;
    } else if (type == "memcpy" || type == "free" || type == "alloc" ||
               type == "sync" || type == "throw") {
      Event e;
      e.type = type;
      e.process = process;
      e.api = getStr(j, "api");
      e.seq = getU64(j, "seq");
      e.tid = getU64(j, "tid");
      e.tNs = getU64(j, "t_ns");
      e.durNs = getU64(j, "dur_ns");
      e.bytes = getU64(j, "bytes");
      e.gpuNs = getU64(j, "gpu_ns");
      e.stream = getU64(j, "stream");
      e.dir = getStr(j, "dir", "unknown");
      e.host = getStr(j, "host", "unknown");
      e.async = getBool(j, "async");
      e.synced = getBool(j, "synced");
      e.deviceMismatch = getBool(j, "device_mismatch");
      e.exception = getStr(j, "exception");
      e.message = getStr(j, "message");
      if (auto s = j.find("stack"); s != j.end() && !s->is_null()) {
        auto it = stackIds.find(static_cast<int64_t>(toU64(*s)));
        if (it == stackIds.end())
          throw std::invalid_argument("event refers to an unknown stack");
        e.stack = it->second;
      }
      t.events.push_back(std::move(e));
    }
    // Unknown types are skipped: newer recorders may add record kinds.
  }
};

} // namespace

uint64_t Trace::peakDeviceBytes() const {
  uint64_t peak = 0;
  for (const auto &p : processes)
    peak = std::max(peak, getU64(p.summary, "peak_device_bytes"));
  return peak;
}

uint64_t Trace::summarySum(const char *field) const {
  uint64_t sum = 0;
  for (const auto &p : processes)
    sum += getU64(p.summary, field);
  return sum;
}

bool readTraceText(const std::string &text, const std::string &name, Trace &into,
                   std::string &err) {
  Loader ld{into, static_cast<int>(into.processes.size()), {}, {}};
  into.processes.push_back(Process{name});
  std::istringstream in(text);
  std::string line;
  size_t lineNo = 0, records = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    try {
      ld.line(json::parse(line));
      ++records;
    } catch (const std::exception &e) {
      err = name + ":" + std::to_string(lineNo) + ": " + e.what();
      return false;
    }
  }
  if (!records) {
    err = name + ": empty trace";
    return false;
  }
  return true;
}

bool readTraceFile(const std::string &path, Trace &into, std::string &err) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    err = path + ": cannot open trace";
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return readTraceText(ss.str(), path, into, err);
}

} // namespace ttv
