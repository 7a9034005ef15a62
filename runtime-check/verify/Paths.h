// Matching the file paths in a trace (from DWARF, usually absolute, on the
// machine that ran the program) to the paths in findings (as torch-tidy
// printed them, often relative, maybe from another machine).
#pragma once

#include <set>
#include <string>
#include <vector>

namespace ttv {

// Lexically normalises a path: collapses "//" and "/./", resolves "dir/..".
std::string normalizePath(const std::string &p);

// Number of trailing path components two paths share ("a/b/c.cpp" and
// "/x/b/c.cpp" share 2).
size_t commonTail(const std::string &a, const std::string &b);

class PathMatcher {
public:
  // `sourceRoot`: when non-empty, trace paths under it are made relative to
  // it before matching. `traceFiles`: every file seen in the trace, to know
  // when a basename alone is unambiguous.
  PathMatcher(std::string sourceRoot, const std::vector<std::string> &traceFiles);

  // True when `tracePath` and `findingPath` name the same file: equal, or a
  // relative finding path that is a whole-component suffix of the trace
  // path; for two absolute paths (two machines), at least two shared
  // trailing components, or the basename when no other file in the trace
  // has it.
  bool matches(const std::string &tracePath, const std::string &findingPath) const;

private:
  std::string strip(const std::string &tracePath) const;
  std::string root_;
  std::set<std::string> ambiguousBasenames_;
};

} // namespace ttv
