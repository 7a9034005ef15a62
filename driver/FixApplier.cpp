//===--- FixApplier.cpp - torch-tidy driver -------------------------------===//

#include "FixApplier.h"

#include "Messages.h"
#include "clang-tidy/ClangTidy.h"
#include "clang/Tooling/Core/Replacement.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/raw_ostream.h"
#include <csignal>
#include <map>
#include <set>
#include <tuple>
#include <pthread.h>

using namespace llvm;
using clang::tooling::Replacement;
using clang::tooling::Replacements;

namespace torchtidy {

/// Writes \p Contents over \p Path via a temporary file and a rename.
static bool writeAtomically(StringRef Path, StringRef Contents) {
  SmallString<256> Real;
  if (sys::fs::real_path(Path, Real)) // follow symlinks: replace the target
    Real = Path;
  sys::fs::file_status Status;
  if (std::error_code EC = sys::fs::status(Real, Status)) {
    printError("cannot write fixes to '" + Path + "': " + EC.message());
    return false;
  }
  sys::fs::perms Perms = Status.permissions();
  if ((Perms & (sys::fs::owner_write | sys::fs::group_write |
                sys::fs::others_write)) == 0) {
    printError("cannot write fixes to '" + Path +
               "': the file is read-only; nothing written");
    return false;
  }
  SmallString<256> Model(Real);
  Model += ".torch-tidy-%%%%%%.tmp";
  SmallString<256> Temp;
  int FD;
  // A signal between creating the temporary file and registering it for
  // removal would leave it behind: it waits until both are done.
  sigset_t Deferred, Previous;
  sigemptyset(&Deferred);
  for (int Signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT})
    sigaddset(&Deferred, Signal);
  pthread_sigmask(SIG_BLOCK, &Deferred, &Previous);
  std::error_code EC =
      sys::fs::createUniqueFile(Model, FD, Temp, sys::fs::OF_None);
  if (!EC)
    sys::RemoveFileOnSignal(Temp);
  pthread_sigmask(SIG_SETMASK, &Previous, nullptr);
  if (EC) {
    printError("cannot write fixes to '" + Path + "': " + EC.message() +
               "; nothing written");
    return false;
  }
  bool OK;
  {
    raw_fd_ostream OS(FD, /*shouldClose=*/true);
    OS << Contents;
    OS.close();
    OK = !OS.has_error();
    if (!OK) {
      printError("cannot write fixes to '" + Path +
                 "': " + OS.error().message() + "; nothing written");
      OS.clear_error();
    }
  }
  if (OK) {
    sys::fs::setPermissions(Temp, Perms);
    if (std::error_code EC = sys::fs::rename(Temp, Real)) {
      printError("cannot write fixes to '" + Path + "': " + EC.message() +
                 "; nothing written");
      OK = false;
    }
  }
  if (!OK)
    sys::fs::remove(Temp);
  sys::DontRemoveFileOnSignal(Temp);
  return OK;
}

FixStats applyFixes(const std::vector<Finding> &Findings) {
  FixStats Stats;
  std::map<std::string, Replacements> PerFile; // sorted: deterministic order
  std::set<std::tuple<std::string, unsigned, unsigned, std::string>> Seen;
  for (const Finding &F : Findings) {
    if (F.Fixes.empty())
      continue;
    // Take all of a finding's replacements or none of them.
    std::map<std::string, Replacements> Trial;
    bool Conflict = false;
    for (const FixReplacement &R : F.Fixes) {
      if (Seen.count({R.Loc.File, R.Loc.Offset, R.Length, R.Replacement}))
        continue;
      Replacements &Rs =
          Trial.emplace(R.Loc.File, PerFile[R.Loc.File]).first->second;
      if (Error E = Rs.add(Replacement(R.Loc.File, R.Loc.Offset, R.Length,
                                       R.Replacement))) {
        consumeError(std::move(E));
        Conflict = true;
        break;
      }
    }
    if (Conflict) {
      printWarning("fix-it of " + F.Check + " at " + F.Loc.File + ":" +
                   Twine(F.Loc.Line) + ":" + Twine(F.Loc.Column) +
                   " overlaps another fix-it; not applied");
      ++Stats.Failures;
      continue;
    }
    for (auto &FileAndRs : Trial)
      PerFile[FileAndRs.first] = std::move(FileAndRs.second);
    for (const FixReplacement &R : F.Fixes)
      if (Seen.insert({R.Loc.File, R.Loc.Offset, R.Length, R.Replacement})
              .second)
        ++Stats.FixesApplied;
  }

  for (const auto &[File, Rs] : PerFile) {
    if (Rs.empty())
      continue;
    auto Buf = MemoryBuffer::getFile(File, /*IsText=*/false,
                                     /*RequiresNullTerminator=*/false);
    if (!Buf) {
      printError("cannot read '" + File + "' to fix it: " +
                 Buf.getError().message());
      ++Stats.Failures;
      continue;
    }
    Expected<std::string> NewText =
        clang::tooling::applyAllReplacements((*Buf)->getBuffer(), Rs);
    if (!NewText) {
      printError("cannot apply fix-its to '" + File +
                 "': " + toString(NewText.takeError()));
      ++Stats.Failures;
      continue;
    }
    if (*NewText == (*Buf)->getBuffer())
      continue;
    if (writeAtomically(File, *NewText))
      ++Stats.FilesWritten;
    else
      ++Stats.Failures;
  }
  return Stats;
}

std::string checkExportPath(StringRef Path) {
  SmallString<256> Abs(Path);
  sys::fs::make_absolute(Abs);
  if (sys::fs::is_directory(Abs))
    return "--export-fixes: '" + Path.str() + "' is a directory";
  StringRef Dir = sys::path::parent_path(Abs);
  if (!sys::fs::is_directory(Dir))
    return "--export-fixes: directory '" + Dir.str() + "' does not exist";
  return "";
}

bool exportFixes(StringRef Path, StringRef MainFile,
                 std::vector<clang::tidy::ClangTidyError> Errors) {
  auto Key = [](const clang::tidy::ClangTidyError &E) {
    return std::make_tuple(normalizePath(E.Message.FilePath, E.BuildDirectory),
                           E.Message.FileOffset, E.DiagnosticName,
                           E.Message.Message);
  };
  llvm::stable_sort(Errors, [&](const auto &A, const auto &B) {
    return Key(A) < Key(B);
  });
  Errors.erase(std::unique(Errors.begin(), Errors.end(),
                           [&](const auto &A, const auto &B) {
                             return Key(A) == Key(B);
                           }),
               Errors.end());
  std::error_code EC;
  raw_fd_ostream OS(Path, EC, sys::fs::OF_None);
  if (EC) {
    printError("--export-fixes: cannot write '" + Path + "': " + EC.message());
    return false;
  }
  clang::tidy::exportReplacements(MainFile, Errors, OS);
  OS.close();
  if (OS.has_error()) {
    printError("--export-fixes: cannot write '" + Path +
               "': " + OS.error().message());
    OS.clear_error();
    return false;
  }
  return true;
}

} // namespace torchtidy
