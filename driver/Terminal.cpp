//===--- Terminal.cpp - torch-tidy driver ---------------------------------===//

#include "Terminal.h"

#include "Messages.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include <optional>

using namespace llvm;

namespace torchtidy {

static std::optional<cl::opt<std::string>> &colorOption() {
  static std::optional<cl::opt<std::string>> Option;
  return Option;
}

void addColorOption(cl::OptionCategory &Category) {
  // LLVM's own `--color` (WithColor's, true/false) is registered when libLLVM
  // loads; take its name over.
  StringMap<cl::Option *> &Registered = cl::getRegisteredOptions();
  auto Existing = Registered.find("color");
  if (Existing != Registered.end())
    Existing->second->removeArgument();
  colorOption().emplace(
      "color",
      cl::desc("Colours in the text output: auto (default: when stdout is a "
               "terminal), always or never"),
      cl::init("auto"), cl::value_desc("auto|always|never"), cl::cat(Category));
}

bool parsedColorMode(ColorMode &Mode) {
  StringRef Value =
      colorOption() ? StringRef(colorOption()->getValue()) : "auto";
  if (Value == "auto")
    Mode = ColorMode::Auto;
  else if (Value == "always")
    Mode = ColorMode::Always;
  else if (Value == "never")
    Mode = ColorMode::Never;
  else {
    printError("unknown --color '" + Value +
               "' (expected auto, always or never)");
    return false;
  }
  return true;
}

bool wantsColor(ColorMode Mode, raw_ostream &OS) {
  switch (Mode) {
  case ColorMode::Always:
    return true;
  case ColorMode::Never:
    return false;
  case ColorMode::Auto:
    return OS.has_colors();
  }
  return false;
}

bool ProgressLine::stderrIsInteractive() {
  if (!sys::Process::StandardErrIsDisplayed())
    return false;
  // A dumb terminal cannot erase a line; CI runners that fake a terminal
  // would keep every update in the log.
  std::optional<std::string> Term = sys::Process::GetEnv("TERM");
  if (!Term || Term->empty() || *Term == "dumb")
    return false;
  return !sys::Process::GetEnv("CI");
}

ProgressLine::ProgressLine(size_t Total, bool Enabled)
    : Total(Total), Active(Enabled && stderrIsInteractive()) {
  SmallString<256> Cwd;
  if (Active && !sys::fs::current_path(Cwd))
    BaseDir = std::string(Cwd);
}

void ProgressLine::start(StringRef File, StringRef Status) {
  if (!Active)
    return;
  std::lock_guard<std::mutex> Lock(Mutex);
  ++Started;
  StringRef Display = File;
  if (!BaseDir.empty() && Display.starts_with(BaseDir) &&
      Display.size() > BaseDir.size() &&
      sys::path::is_separator(Display[BaseDir.size()]))
    Display = Display.drop_front(BaseDir.size() + 1);
  std::string Prefix =
      "[" + std::to_string(Started) + "/" + std::to_string(Total) + "] ";
  if (!Status.empty())
    Prefix += Status.str() + " ";
  // A line that wraps cannot be overwritten with '\r': keep the end of a
  // long path.
  std::string Path = Display.str();
  if (unsigned Columns = sys::Process::StandardErrColumns()) {
    size_t Room = Columns > Prefix.size() + 4 ? Columns - Prefix.size() - 1 : 0;
    if (Path.size() > Room)
      Path = Room > 3 ? "..." + Path.substr(Path.size() - (Room - 3)) : "";
  }
  errs() << '\r' << Prefix << Path << "\x1b[K";
  errs().flush();
  Shown = true;
}

void ProgressLine::finish() {
  std::lock_guard<std::mutex> Lock(Mutex);
  if (!Shown)
    return;
  errs() << "\r\x1b[K";
  errs().flush();
  Shown = false;
}

} // namespace torchtidy
