//===--- ChangedLines.cpp - torch-tidy driver -----------------------------===//

#include "ChangedLines.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

using namespace llvm;

namespace torchtidy {

ChangedLines parseUnifiedDiff(StringRef Diff, StringRef Root) {
  ChangedLines Out;
  std::string File;
  SmallVector<StringRef, 0> Lines;
  Diff.split(Lines, '\n');
  for (StringRef Line : Lines) {
    if (Line.consume_front("+++ ")) {
      File.clear();
      if (Line.consume_front("b/"))
        File = normalizePath(Line, Root);
      continue;
    }
    // `@@ -a[,b] +c[,d] @@`: d lines from c on the new side (none when d
    // is 0: a deletion, which touches no line that is left).
    if (File.empty() || !Line.consume_front("@@ "))
      continue;
    size_t Plus = Line.find(" +");
    if (Plus == StringRef::npos)
      continue;
    StringRef Range = Line.drop_front(Plus + 2).take_until(
        [](char C) { return C == ' '; });
    auto [Start, Count] = Range.split(',');
    unsigned First = 0, Length = 1;
    if (Start.getAsInteger(10, First) ||
        (!Count.empty() && Count.getAsInteger(10, Length)) || Length == 0)
      continue;
    Out[File].push_back({First, First + Length - 1});
  }
  return Out;
}

/// Runs git with \p Args in \p Dir; its stdout, or an error.
static Expected<std::string> git(StringRef Dir, ArrayRef<StringRef> Args) {
  ErrorOr<std::string> Git = sys::findProgramByName("git");
  if (!Git)
    return createStringError(inconvertibleErrorCode(),
                             "--diff-base needs git on PATH");
  SmallString<128> Output, Errors;
  sys::fs::createTemporaryFile("torch-tidy-diff", "txt", Output);
  sys::fs::createTemporaryFile("torch-tidy-diff", "err", Errors);
  std::vector<StringRef> Argv = {*Git, "-C", Dir};
  Argv.insert(Argv.end(), Args.begin(), Args.end());
  std::optional<StringRef> Redirects[] = {StringRef(""), Output.str(),
                                          Errors.str()};
  int Status = sys::ExecuteAndWait(*Git, Argv, std::nullopt, Redirects);
  auto Read = [](StringRef Path) {
    auto Buffer = MemoryBuffer::getFile(Path);
    return Buffer ? (*Buffer)->getBuffer().str() : std::string();
  };
  std::string Out = Read(Output), Err = Read(Errors);
  sys::fs::remove(Output);
  sys::fs::remove(Errors);
  if (Status != 0)
    return createStringError(
        inconvertibleErrorCode(), "git " + join(Args, " ") + " failed: " +
                                      StringRef(Err).trim().split('\n').first);
  return Out;
}

Expected<ChangedLines> changedLines(StringRef Dir, StringRef Base) {
  Expected<std::string> Root = git(Dir, {"rev-parse", "--show-toplevel"});
  if (!Root)
    return Root.takeError();
  std::vector<StringRef> Args = {"diff", "-U0", "--no-color",
                                 "--no-ext-diff", "--no-renames"};
  std::string Ref = Base.str();
  if (Base.empty())
    Args.push_back("--cached");
  else
    Args.push_back(Ref);
  Args.push_back("--");
  Expected<std::string> Diff = git(StringRef(*Root).trim(), Args);
  if (!Diff)
    return Diff.takeError();
  return parseUnifiedDiff(*Diff, StringRef(*Root).trim());
}

void keepChanged(std::vector<Finding> &Findings, const ChangedLines &Changed) {
  auto OnChangedLine = [&](const Location &L) {
    auto It = Changed.find(L.File);
    return It != Changed.end() &&
           any_of(It->second, [&](const auto &R) {
             return L.Line >= R.first && L.Line <= R.second;
           });
  };
  erase_if(Findings, [&](const Finding &F) {
    return !OnChangedLine(F.Loc) &&
           none_of(F.Notes, [&](const Note &N) { return OnChangedLine(N.Loc); });
  });
}

} // namespace torchtidy
