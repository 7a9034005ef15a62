// Turns raw stacks (module + offset) into source locations with addr2line
// (or llvm-symbolizer / llvm-addr2line in GNU mode), one batched process per
// module, and picks the user-code frames of each stack.
#pragma once

#include "Trace.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ttv {

struct SourceLoc {
  std::string file;
  int line = 0;
  std::string function;
  bool valid() const { return !file.empty() && line > 0; }
};

// The user-code frames of one stack, innermost first. `site()` is the first.
struct StackLocs {
  std::vector<SourceLoc> user;
  const SourceLoc *site() const { return user.empty() ? nullptr : &user.front(); }
};

struct SymbolizerOptions {
  std::string tool;  // empty: search PATH for addr2line, llvm-addr2line, llvm-symbolizer
  std::vector<std::string> systemPrefixes;  // extra module/file prefixes to skip
  bool verbose = false;
};

class Symbolizer {
public:
  explicit Symbolizer(SymbolizerOptions opts);

  // Path of the tool that will run, or "" when none was found.
  const std::string &tool() const { return tool_; }

  // True for libraries that are never user code: libtorch, libc10, CUDA,
  // the C/C++ runtime, the recorder itself, and anything under system
  // library directories or Python packages.
  bool isSystemModule(const std::string &path) const;
  // True for headers of LibTorch, CUDA and the C++ library: code inlined
  // from them into a user binary is not the user's line.
  bool isSystemFile(const std::string &path) const;

  // Symbolises offsets in one module. Each result is the inline chain of
  // that address, innermost first (empty when unknown). Offsets are used as
  // given (pass return address - 1 for call sites).
  std::vector<std::vector<SourceLoc>> symbolize(const std::string &module,
                                                const std::vector<uint64_t> &offsets);

  // Resolves every stack of the trace to its user frames.
  std::vector<StackLocs> resolve(const Trace &trace);

  // Parses addr2line -a -f -i output for `count` addresses (exposed for tests).
  static std::vector<std::vector<SourceLoc>> parseAddr2line(const std::string &out,
                                                            size_t count);

private:
  SymbolizerOptions opts_;
  std::string tool_;
  bool llvmStyle_ = false;
};

// Runs argv[0] with the arguments, returns its stdout (stderr discarded).
// Returns false when it cannot be started or exits non-zero.
bool runCapture(const std::vector<std::string> &argv, std::string &out);

// Finds an executable on PATH; "" when missing.
std::string findProgram(const std::string &name);

} // namespace ttv
