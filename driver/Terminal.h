//===--- Terminal.h - torch-tidy driver -------------------------*- C++ -*-===//
//
// What the driver shows only to a person at a terminal: colours in the text
// output (--color=auto|always|never) and the `[i/N] file` progress line on
// stderr. Pipes, CI logs and the JSON/SARIF formats never see either, so
// their bytes stay the same wherever they go.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_TERMINAL_H
#define TORCH_TIDY_DRIVER_TERMINAL_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"
#include <cstddef>
#include <mutex>
#include <string>

namespace torchtidy {

enum class ColorMode { Auto, Always, Never };

/// Registers `--color=<auto|always|never>` in \p Category. LLVM registers a
/// boolean `--color` of its own, and a second option of that name aborts the
/// program, so this one replaces it. Call once, before parsing.
void addColorOption(llvm::cl::OptionCategory &Category);

/// The parsed --color; on an unknown value prints a one-line error and
/// returns false.
bool parsedColorMode(ColorMode &Mode);

/// Whether \p OS gets colours under \p Mode: `auto` means a terminal that
/// can show them.
bool wantsColor(ColorMode Mode, llvm::raw_ostream &OS);

/// `[i/N] file` on stderr as each translation unit starts, overwritten in
/// place. It is shown only when stderr is a terminal that can move the cursor
/// back (not TERM=dumb), the CI variable is unset, and the caller enables it;
/// otherwise every method does nothing. Safe to call from worker threads.
class ProgressLine {
public:
  ProgressLine(size_t Total, bool Enabled);
  ~ProgressLine() { finish(); }

  /// A translation unit of \p File starts; \p Status (say, an ETA) goes
  /// between the counter and the file.
  void start(llvm::StringRef File, llvm::StringRef Status = "");
  /// Erases the line, so that what follows on stderr starts clean.
  void finish();

  /// Whether a terminal would show the line (stderr is one, not dumb, no CI).
  static bool stderrIsInteractive();

private:
  std::mutex Mutex;
  size_t Total;
  size_t Started = 0;
  bool Active;
  bool Shown = false;
  std::string BaseDir; // paths under it are shown relative to it
};

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_TERMINAL_H
