// torch-tidy's findings JSON (the output contract in shared/checks.md):
// {"version": 1, "findings": [...]} or a bare array of findings.
#pragma once

#include <string>
#include <vector>

namespace ttv {

struct Location {
  std::string file;
  int line = 0;
  int column = 0;
  std::string message;
};

struct Finding {
  std::string check;
  std::string level;
  Location loc;                 // file, line, column, message
  std::vector<Location> notes;  // note: lines
};

// Parses findings from JSON text. On error returns false and sets `err`.
bool parseFindings(const std::string &text, std::vector<Finding> &out, std::string &err);
bool readFindingsFile(const std::string &path, std::vector<Finding> &out, std::string &err);

} // namespace ttv
