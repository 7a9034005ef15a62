#include "TestUtil.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>

namespace tttest {

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeFile(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::map<std::string, int> markerLines(const std::string &sourcePath) {
  std::map<std::string, int> out;
  std::istringstream in(readFile(sourcePath));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    size_t p = line.find("// MARK:");
    if (p == std::string::npos)
      continue;
    std::string name = line.substr(p + 8);
    name = name.substr(0, name.find_first_of(" \t\r"));
    out[name] = n;
  }
  return out;
}

int runShell(const std::string &cmd, std::string &out) {
  FILE *p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p)
    return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0)
    out.append(buf, n);
  int st = pclose(p);
  if (WIFEXITED(st))
    return WEXITSTATUS(st);
  if (WIFSIGNALED(st))
    return 128 + WTERMSIG(st);
  return -1;
}

std::string shQuote(const std::string &s) {
  std::string r = "'";
  for (char c : s)
    r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

std::string scratchDir(const std::string &name) {
  std::string d = std::string(TT_TMP_DIR) + "/" + name;
  std::string out;
  runShell("rm -rf " + shQuote(d) + " && mkdir -p " + shQuote(d), out);
  return d;
}

ttv::Event event(const std::string &type, int64_t stack) {
  ttv::Event e;
  e.type = type;
  e.stack = stack;
  e.durNs = 1000;
  return e;
}

ttv::Event copy(const std::string &dir, bool async, const std::string &host, bool synced,
                int64_t stack, uint64_t bytes) {
  ttv::Event e = event("memcpy", stack);
  e.dir = dir;
  e.async = async;
  e.host = host;
  e.synced = synced;
  e.bytes = bytes;
  return e;
}

ttv::StackLocs at(const std::string &file, int line, int outerLine) {
  ttv::StackLocs s;
  s.user.push_back({file, line, "f"});
  if (outerLine)
    s.user.push_back({file, outerLine, "main"});
  return s;
}

} // namespace tttest
