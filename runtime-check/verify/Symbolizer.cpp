// Symbolisation through addr2line-compatible tools. No DWARF is read here.
#include "Symbolizer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <spawn.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace ttv {
namespace {

std::string baseName(const std::string &p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

bool startsWith(const std::string &s, const std::string &prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

bool contains(const std::string &s, const char *needle) {
  return s.find(needle) != std::string::npos;
}

bool isExecutable(const std::string &p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

bool fileExists(const std::string &p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

constexpr size_t kBatch = 200;  // addresses per tool invocation

} // namespace

std::string findProgram(const std::string &name) {
  if (name.find('/') != std::string::npos)
    return isExecutable(name) ? name : "";
  const char *path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    if (isExecutable(cand))
      return cand;
  }
  return "";
}

bool runCapture(const std::vector<std::string> &argv, std::string &out) {
  int fds[2];
  if (pipe(fds) != 0)
    return false;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char *> args;
  for (const auto &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return false;
  }
  char buf[65536];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0)
    out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

Symbolizer::Symbolizer(SymbolizerOptions opts) : opts_(std::move(opts)) {
  if (!opts_.tool.empty()) {
    tool_ = findProgram(opts_.tool);
  } else {
    for (const char *cand : {"addr2line", "llvm-addr2line", "llvm-symbolizer"}) {
      tool_ = findProgram(cand);
      if (!tool_.empty())
        break;
    }
  }
  llvmStyle_ = contains(baseName(tool_), "llvm-symbolizer");
}

bool Symbolizer::isSystemModule(const std::string &path) const {
  if (path.empty())
    return true;
  for (const auto &p : opts_.systemPrefixes)
    if (startsWith(path, p))
      return true;
  static const char *const kDirs[] = {"/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/",
                                      "/usr/local/cuda", "/opt/nvidia/"};
  for (const char *d : kDirs)
    if (startsWith(path, d))
      return true;
  if (contains(path, "/site-packages/") || contains(path, "/dist-packages/"))
    return true;
  const std::string b = baseName(path);
  static const char *const kLibs[] = {
      "libtorch", "libc10", "libcuda", "libcudart", "libcupti", "libnvrtc",
      "libcublas", "libcudnn", "libnccl", "libstdc++", "libc.so", "libc-",
      "libm.so", "libgcc_s", "libpthread", "libdl", "ld-linux", "libgomp",
      "libomp", "libnvToolsExt", "linux-vdso", "libtorch_tidy_rt", "libpython"};
  for (const char *l : kLibs)
    if (startsWith(b, l))
      return true;
  return false;
}

bool Symbolizer::isSystemFile(const std::string &path) const {
  if (path.empty() || path == "??")
    return true;
  for (const auto &p : opts_.systemPrefixes)
    if (startsWith(path, p))
      return true;
  static const char *const kParts[] = {
      "/torch/csrc/", "/ATen/", "/c10/", "/caffe2/", "/include/torch/",
      "/torch/include/", "/include/c++/", "/bits/", "/cuda/include/",
      "/site-packages/", "/dist-packages/"};
  for (const char *p : kParts)
    if (contains(path, p))
      return true;
  static const char *const kPrefixes[] = {"/usr/include/", "/usr/local/cuda", "/usr/lib/"};
  for (const char *p : kPrefixes)
    if (startsWith(path, p))
      return true;
  return false;
}

std::vector<std::vector<SourceLoc>> Symbolizer::parseAddr2line(const std::string &out,
                                                               size_t count) {
  std::vector<std::vector<SourceLoc>> res;
  std::istringstream in(out);
  std::string line, function;
  bool haveFunction = false;
  auto isAddr = [](const std::string &l) {
    return l.size() > 2 && l[0] == '0' && l[1] == 'x' &&
           l.find_first_not_of("0123456789abcdefABCDEF", 2) == std::string::npos;
  };
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (isAddr(line)) {
      res.emplace_back();
      haveFunction = false;
      continue;
    }
    if (res.empty() || line.empty())
      continue;
    if (!haveFunction) {
      function = line;
      haveFunction = true;
      continue;
    }
    haveFunction = false;
    // "file:line", "file:line (discriminator N)", "file:line:col" or "??:0".
    std::string loc = line.substr(0, line.find(" ("));
    SourceLoc sl;
    sl.function = function == "??" ? "" : function;
    size_t c1 = loc.rfind(':');
    if (c1 != std::string::npos) {
      std::string tail = loc.substr(c1 + 1);
      std::string head = loc.substr(0, c1);
      size_t c2 = head.rfind(':');
      // llvm tools may append a column: file:line:col.
      if (c2 != std::string::npos &&
          head.find_first_not_of("0123456789", c2 + 1) == std::string::npos &&
          c2 + 1 < head.size()) {
        tail = head.substr(c2 + 1);
        head = head.substr(0, c2);
      }
      sl.file = head;
      sl.line = std::atoi(tail.c_str());
    }
    if (sl.file == "??")
      sl.file.clear();
    res.back().push_back(sl);
  }
  res.resize(count);
  return res;
}

std::vector<std::vector<SourceLoc>>
Symbolizer::symbolize(const std::string &module, const std::vector<uint64_t> &offsets) {
  std::vector<std::vector<SourceLoc>> all;
  all.reserve(offsets.size());
  if (tool_.empty() || !fileExists(module)) {
    all.resize(offsets.size());
    return all;
  }
  for (size_t start = 0; start < offsets.size(); start += kBatch) {
    size_t n = std::min(kBatch, offsets.size() - start);
    std::vector<std::string> argv{tool_};
    if (llvmStyle_)
      argv.insert(argv.end(), {"--output-style=GNU", "--obj=" + module, "-a", "-f", "-C", "-i"});
    else
      argv.insert(argv.end(), {"-e", module, "-a", "-f", "-C", "-i"});
    for (size_t i = 0; i < n; ++i) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%llx",
                    static_cast<unsigned long long>(offsets[start + i]));
      argv.push_back(buf);
    }
    std::string out;
    if (!runCapture(argv, out) && opts_.verbose)
      std::fprintf(stderr, "torch-tidy-verify: %s failed on %s\n", tool_.c_str(),
                   module.c_str());
    auto part = parseAddr2line(out, n);
    for (auto &p : part)
      all.push_back(std::move(p));
  }
  return all;
}

std::vector<StackLocs> Symbolizer::resolve(const Trace &trace) {
  // Collect the distinct (module, call address) pairs in user modules.
  std::map<int, std::set<uint64_t>> wanted;
  std::vector<char> userModule(trace.modules.size());
  for (size_t m = 0; m < trace.modules.size(); ++m)
    userModule[m] = !isSystemModule(trace.modules[m]);
  for (const auto &st : trace.stacks)
    for (const auto &f : st)
      if (!f.presymbolised && f.module >= 0 && userModule[f.module] && f.offset > 0)
        wanted[f.module].insert(f.offset - 1);  // return address -> call site

  std::map<std::pair<int, uint64_t>, std::vector<SourceLoc>> table;
  for (const auto &[mod, offs] : wanted) {
    std::vector<uint64_t> list(offs.begin(), offs.end());
    auto res = symbolize(trace.modules[mod], list);
    for (size_t i = 0; i < list.size(); ++i)
      table[{mod, list[i]}] = std::move(res[i]);
  }

  std::vector<StackLocs> out(trace.stacks.size());
  for (size_t s = 0; s < trace.stacks.size(); ++s) {
    auto &user = out[s].user;
    auto add = [&](const SourceLoc &l) {
      if (!l.valid() || isSystemFile(l.file))
        return;
      for (const auto &u : user)
        if (u.file == l.file && u.line == l.line)
          return;
      user.push_back(l);
    };
    for (const auto &f : trace.stacks[s]) {
      if (f.presymbolised) {
        if (f.module >= 0 && !userModule[f.module])
          continue;
        add(SourceLoc{f.file, f.line, f.function});
        continue;
      }
      if (f.module < 0 || !userModule[f.module] || f.offset == 0)
        continue;
      auto it = table.find({f.module, f.offset - 1});
      if (it == table.end())
        continue;
      // The inline chain is innermost first: LibTorch header code inlined
      // into a user function is skipped, user functions inlined into each
      // other all count.
      for (const auto &l : it->second)
        add(l);
    }
  }
  return out;
}

} // namespace ttv
