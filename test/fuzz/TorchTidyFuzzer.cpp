//===--- TorchTidyFuzzer.cpp - torch-tidy libFuzzer target ----------------===//
//
// Feeds arbitrary source text through the whole pipeline: parse it against
// the mock LibTorch headers (test/Inputs, with `-include torch/torch.h` so
// that mutations need not keep the include line intact), run every torch-*
// check through clang-tidy's own AST consumer and diagnostic consumer, and
// collect the diagnostics as the driver does. Crashes, sanitizer reports and
// fix-its that point outside the input are failures.
//
// A crashing input reproduces with the driver:
//   torch-tidy crash.cpp -- -std=c++17 -isystem test/Inputs \
//     -include torch/torch.h
// (see test/driver/fuzz-regressions.test and scripts/fuzz.sh).
//
//===----------------------------------------------------------------------===//

#include "TorchTidyForceLinker.h"
#include "clang-tidy/ClangTidy.h"
#include "clang-tidy/ClangTidyDiagnosticConsumer.h"
#include "clang-tidy/ClangTidyModule.h"
#include "clang-tidy/ClangTidyOptions.h"
#include "clang/Basic/FileManager.h"
#include "clang/Frontend/FrontendActions.h"
#include "clang/Tooling/Core/Replacement.h"
#include "clang/Tooling/Tooling.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/VirtualFileSystem.h"
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#ifndef TORCH_TIDY_TEST_INPUTS
#error "TORCH_TIDY_TEST_INPUTS must name test/Inputs"
#endif
#ifndef TORCH_TIDY_CLANG_RESOURCE_DIR
#error "TORCH_TIDY_CLANG_RESOURCE_DIR must name clang's resource directory"
#endif

using namespace clang;
using namespace clang::tidy;

namespace {

constexpr const char *InputPath = "/torch-tidy-fuzz/input.cpp";

class TidyAction : public ASTFrontendAction {
public:
  explicit TidyAction(ClangTidyContext &Context) : Factory(Context) {}
  std::unique_ptr<ASTConsumer> CreateASTConsumer(CompilerInstance &CI,
                                                 StringRef File) override {
    return Factory.createASTConsumer(CI, File);
  }

private:
  ClangTidyASTConsumerFactory Factory;
};

[[noreturn]] void fail(const char *What) {
  std::fprintf(stderr, "torch-tidy-fuzzer: %s\n", What);
  std::abort();
}

/// A fix-it must lie inside the file it edits, and the replacements of one
/// diagnostic must apply cleanly (the driver relies on both).
void checkFixes(const ClangTidyError &Error, StringRef Code) {
  for (const auto &FileAndReplacements : Error.Message.Fix) {
    if (FileAndReplacements.first() != InputPath)
      continue;
    const tooling::Replacements &Rs = FileAndReplacements.second;
    for (const tooling::Replacement &R : Rs)
      if (R.getOffset() > Code.size() ||
          R.getLength() > Code.size() - R.getOffset())
        fail("a fix-it points outside the input");
    Expected<std::string> Fixed = tooling::applyAllReplacements(Code, Rs);
    if (!Fixed) {
      consumeError(Fixed.takeError());
      fail("a diagnostic's fix-its do not apply");
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  StringRef Code(reinterpret_cast<const char *>(Data), Size);

  ClangTidyOptions Options = ClangTidyOptions::getDefaults();
  Options.Checks = "-*,torch-*";
  ClangTidyContext Context(std::make_unique<DefaultOptionsProvider>(
      ClangTidyGlobalOptions(), Options));
  ClangTidyDiagnosticConsumer DiagConsumer(Context, nullptr,
                                           /*RemoveIncompatibleErrors=*/true,
                                           /*GetFixesFromNotes=*/false);
  DiagnosticsEngine DE(new DiagnosticIDs(), new DiagnosticOptions(),
                       &DiagConsumer, /*ShouldOwnClient=*/false);
  Context.setDiagnosticsEngine(&DE);

  // The input lives in memory; the mock headers and clang's builtin headers
  // come from disk.
  auto InMemory = llvm::makeIntrusiveRefCnt<llvm::vfs::InMemoryFileSystem>();
  InMemory->addFile(InputPath, 0,
                    llvm::MemoryBuffer::getMemBufferCopy(Code, InputPath));
  auto Overlay = llvm::makeIntrusiveRefCnt<llvm::vfs::OverlayFileSystem>(
      llvm::vfs::getRealFileSystem());
  Overlay->pushOverlay(InMemory);
  auto Files =
      llvm::makeIntrusiveRefCnt<FileManager>(FileSystemOptions(), Overlay);

  std::vector<std::string> Args = {
      "torch-tidy-fuzzer",
      "-fsyntax-only",
      "-std=c++17",
      "-isystem",
      TORCH_TIDY_TEST_INPUTS,
      "-include",
      "torch/torch.h",
      "-resource-dir=" TORCH_TIDY_CLANG_RESOURCE_DIR,
      InputPath};
  tooling::ToolInvocation Invocation(
      Args, std::make_unique<TidyAction>(Context), Files.get());
  Invocation.setDiagnosticConsumer(&DiagConsumer);
  Invocation.run();

  for (const ClangTidyError &Error : DiagConsumer.take())
    checkFixes(Error, Code);
  return 0;
}
