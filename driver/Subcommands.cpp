//===--- Subcommands.cpp - torch-tidy driver ------------------------------===//
//
// `torch-tidy merge-sarif ...` merges the SARIF files of --shard runs
// (MergeSarif.h).
//
// `torch-tidy report ...` writes the HTML report from saved findings
// (HtmlReport.h).
//
// `torch-tidy lsp ...` is the language server (LanguageServer.h).
//
// `torch-tidy verify ...` forwards to torch-tidy-verify, the runtime
// verifier of runtime-check/, so that users see one tool. The verifier has
// no LLVM dependency and is a separate program because it must also build on
// a GPU node that has only nvcc and CMake.
//
//===----------------------------------------------------------------------===//

#include "Subcommands.h"
#include "HtmlReport.h"
#include "LanguageServer.h"
#include "MergeSarif.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"
#include <cerrno>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

using namespace llvm;

namespace torchtidy {

namespace {

constexpr int ExitUsageOrToolError = 2;

/// torch-tidy-verify beside this executable (the build tree and an install
/// both put them in one bin/), else on PATH.
std::string findVerifier(const char *Argv0) {
  static int Anchor;
  std::string Self = sys::fs::getMainExecutable(Argv0, &Anchor);
  if (!Self.empty()) {
    SmallString<256> Beside(sys::path::parent_path(Self));
    sys::path::append(Beside, "torch-tidy-verify");
    if (sys::fs::can_execute(Beside))
      return std::string(Beside);
  }
  if (ErrorOr<std::string> OnPath = sys::findProgramByName("torch-tidy-verify"))
    return *OnPath;
  return "";
}

int forwardToVerifier(int Argc, const char **Argv) {
  std::string Verifier = findVerifier(Argv[0]);
  if (Verifier.empty()) {
    errs() << "torch-tidy: error: torch-tidy-verify not found beside "
              "torch-tidy or on PATH; build runtime-check/ (it needs the "
              "CUDA toolkit)\n";
    return ExitUsageOrToolError;
  }
  std::vector<const char *> Args = {Verifier.c_str()};
  for (int I = 2; I < Argc; ++I)
    Args.push_back(Argv[I]);
  Args.push_back(nullptr);
  // exec, not spawn: the verifier owns the terminal, the signals and the
  // exit status, exactly as if it had been run directly.
  execv(Verifier.c_str(), const_cast<char *const *>(Args.data()));
  errs() << "torch-tidy: error: cannot run " << Verifier << ": "
         << std::strerror(errno) << "\n";
  return ExitUsageOrToolError;
}

} // namespace

std::optional<int> runSubcommand(int Argc, const char **Argv) {
  if (Argc < 2)
    return std::nullopt;
  StringRef Command = Argv[1];
  if (Command == "verify")
    return forwardToVerifier(Argc, Argv);
  if (Command == "merge-sarif")
    return mergeSarifMain(ArrayRef(Argv + 2, Argv + Argc));
  if (Command == "report")
    return reportMain(ArrayRef(Argv + 2, Argv + Argc), Argv[0]);
  if (Command == "lsp")
    return languageServerMain(ArrayRef(Argv + 2, Argv + Argc), Argv[0]);
  return std::nullopt;
}

} // namespace torchtidy
