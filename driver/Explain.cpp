//===--- Explain.cpp - torch-tidy driver ----------------------------------===//

#include "Explain.h"

#include "Config.h"
#include "Messages.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace llvm;

namespace torchtidy {

std::string findDocsDir(const char *Argv0) {
  static int Anchor;
  std::string Exe =
      sys::fs::getMainExecutable(Argv0, reinterpret_cast<void *>(&Anchor));
  if (!Exe.empty()) {
    SmallString<256> Dir(sys::path::parent_path(sys::path::parent_path(Exe)));
    sys::path::append(Dir, "share", "torch-tidy", "checks");
    if (sys::fs::is_directory(Dir))
      return std::string(Dir);
  }
  // A binary run from a build tree without the copy (or moved out of it).
  if (sys::fs::is_directory(TORCH_TIDY_SOURCE_DOCS_DIR))
    return TORCH_TIDY_SOURCE_DOCS_DIR;
  return "";
}

/// The markdown page, headings bold and code blocks green when \p OS shows
/// colours (raw_ostream ignores colour changes otherwise).
static void printPage(StringRef Page, raw_ostream &OS) {
  bool InCode = false;
  SmallVector<StringRef, 0> Lines;
  Page.split(Lines, '\n');
  if (!Lines.empty() && Lines.back().empty())
    Lines.pop_back();
  for (StringRef Line : Lines) {
    bool Fence = Line.starts_with("```");
    if (Fence)
      InCode = !InCode;
    bool Code = !Fence && InCode;
    bool Heading = !InCode && Line.starts_with("#");
    if (Code)
      OS.changeColor(raw_ostream::GREEN);
    else if (Heading)
      OS.changeColor(raw_ostream::SAVEDCOLOR, /*Bold=*/true);
    OS << Line;
    if (Code || Heading)
      OS.resetColor();
    OS << '\n';
  }
}

int explainCheck(StringRef Check, const char *Argv0, raw_ostream &OS) {
  std::vector<std::string> Known = registeredChecks();
  auto IsTorchCheck = [&](StringRef Name) {
    return Name.starts_with("torch-") && llvm::is_contained(Known, Name);
  };
  std::string Name = Check.str();
  if (!IsTorchCheck(Name) && IsTorchCheck("torch-" + Name))
    Name = "torch-" + Name;
  if (!IsTorchCheck(Name)) {
    printError("unknown check '" + Check +
               "' for --explain (see --list-checks)");
    return 2;
  }
  std::string Dir = findDocsDir(Argv0);
  if (Dir.empty()) {
    printError("cannot find the documentation of '" + Name +
               "': no share/torch-tidy/checks next to the executable and "
               "no " TORCH_TIDY_SOURCE_DOCS_DIR);
    return 2;
  }
  SmallString<256> Path(Dir);
  sys::path::append(Path, Name + ".md");
  ErrorOr<std::unique_ptr<MemoryBuffer>> Page = MemoryBuffer::getFile(Path);
  if (!Page) {
    printError("cannot read '" + Path + "': " + Page.getError().message());
    return 2;
  }
  printPage((*Page)->getBuffer(), OS);
  return 0;
}

} // namespace torchtidy
