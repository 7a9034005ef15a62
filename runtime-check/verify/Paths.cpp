#include "Paths.h"

#include <map>
#include <sstream>

namespace ttv {
namespace {

std::vector<std::string> components(const std::string &p) {
  std::vector<std::string> out;
  std::stringstream ss(p);
  std::string c;
  while (std::getline(ss, c, '/'))
    if (!c.empty() && c != ".")
      out.push_back(c);
  return out;
}

std::string baseName(const std::string &p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

} // namespace

std::string normalizePath(const std::string &p) {
  std::vector<std::string> out;
  for (auto &c : components(p)) {
    if (c == ".." && !out.empty() && out.back() != "..")
      out.pop_back();
    else if (c == ".." && p.rfind('/', 0) == 0)
      continue;  // "/.." is "/"
    else
      out.push_back(c);
  }
  std::string r = p.rfind('/', 0) == 0 ? "/" : "";
  for (size_t i = 0; i < out.size(); ++i)
    r += (i ? "/" : "") + out[i];
  return r.empty() ? "." : r;
}

size_t commonTail(const std::string &a, const std::string &b) {
  auto ca = components(normalizePath(a)), cb = components(normalizePath(b));
  size_t n = 0;
  while (n < ca.size() && n < cb.size() && ca[ca.size() - 1 - n] == cb[cb.size() - 1 - n] &&
         ca[ca.size() - 1 - n] != "..")
    ++n;
  return n;
}

PathMatcher::PathMatcher(std::string sourceRoot, const std::vector<std::string> &traceFiles)
    : root_(sourceRoot.empty() ? "" : normalizePath(sourceRoot)) {
  std::map<std::string, std::set<std::string>> byBase;
  for (const auto &f : traceFiles)
    byBase[baseName(f)].insert(normalizePath(f));
  for (const auto &[base, files] : byBase)
    if (files.size() > 1)
      ambiguousBasenames_.insert(base);
}

std::string PathMatcher::strip(const std::string &tracePath) const {
  std::string t = normalizePath(tracePath);
  if (!root_.empty() && t.size() > root_.size() && t.compare(0, root_.size(), root_) == 0 &&
      t[root_.size()] == '/')
    return t.substr(root_.size() + 1);
  return t;
}

bool PathMatcher::matches(const std::string &tracePath, const std::string &findingPath) const {
  const std::string t = strip(tracePath);
  const std::string f = normalizePath(findingPath);
  if (t == f)
    return true;
  size_t tail = commonTail(t, f);
  if (tail == 0)
    return false;
  size_t nt = components(t).size(), nf = components(f).size();
  bool tAbs = t.rfind('/', 0) == 0, fAbs = f.rfind('/', 0) == 0;
  if (!fAbs)  // a relative finding path must be a whole suffix
    return tail == nf || (!tAbs && tail == nt);
  if (!tAbs)
    return tail == nt;
  // Two absolute paths, e.g. from two machines.
  return tail >= 2 || !ambiguousBasenames_.count(baseName(t));
}

} // namespace ttv
