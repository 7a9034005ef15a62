// Helpers shared by the runtime-check tests.
#pragma once

#include "Matcher.h"
#include "Trace.h"

#include <map>
#include <string>
#include <vector>

namespace tttest {

std::string readFile(const std::string &path);
void writeFile(const std::string &path, const std::string &text);

// "MARK:<name>" comments in a source file -> their line numbers.
std::map<std::string, int> markerLines(const std::string &sourcePath);

// Runs a shell command; returns its exit status (128+signal when killed)
// and captures stdout+stderr.
int runShell(const std::string &cmd, std::string &out);

// Quotes a word for /bin/sh.
std::string shQuote(const std::string &s);

// A fresh scratch directory under TT_TMP_DIR.
std::string scratchDir(const std::string &name);

// Builders for hand-made traces.
ttv::Event event(const std::string &type, int64_t stack);
ttv::Event copy(const std::string &dir, bool async, const std::string &host, bool synced,
                int64_t stack, uint64_t bytes = 1024);
ttv::StackLocs at(const std::string &file, int line, int outerLine = 0);

} // namespace tttest
