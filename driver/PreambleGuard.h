//===--- PreambleGuard.h - torch-tidy driver --------------------*- C++ -*-===//
//
// When may a TU load a PCH of the system headers it includes first, and
// then be parsed as it is? Its own includes of those headers are skipped by
// their guards, so the TU means what it meant if nothing that comes before
// them in the TU can change what they mean, and if they are found where they
// were found when the PCH was built. Clang's own validation of a PCH
// (clang/lib/Serialization/ASTReader.cpp) compares language and target
// options and the command-line macros, and the contents of the input files;
// it accepts other include dirs and extra macros (see the FIXME in
// checkPreprocessorOptions). The rest is checked here:
//
//  - the flags: TUs share a PCH only with equal PreambleFlags::KeyArgs
//    (everything but the project's -I/-iquote dirs);
//  - the project dirs (shadowingHeader): none holds a file under a name
//    that the PCH's headers looked up (#include, __has_include), so every
//    lookup finds what it found;
//  - the TU's text before the last preamble header (PreambleGuard, during
//    the parse): only preprocessor directives of the TU's own files; the
//    system headers it includes are exactly the preamble's, in order; no
//    #define or #undef of a word that the PCH's files contain; no test or
//    expansion of a macro that they define or undefine; no #pragma but
//    `once`; no code.
//
// A TU that fails the last check is parsed again in full.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_DRIVER_PREAMBLEGUARD_H
#define TORCH_TIDY_DRIVER_PREAMBLEGUARD_H

#include "PreambleFacts.h"
#include "clang/Lex/PPCallbacks.h"
#include <memory>
#include <string>

namespace clang {
class Preprocessor;
}

namespace torchtidy {

/// Records Headers, Lookups and Macros while the PCH is built.
class PreambleRecorder : public clang::PPCallbacks {
public:
  PreambleRecorder(clang::Preprocessor &PP, PreambleFacts &Out)
      : PP(PP), Out(Out) {}
  void InclusionDirective(clang::SourceLocation HashLoc, const clang::Token &,
                          llvm::StringRef FileName, bool IsAngled,
                          clang::CharSourceRange, clang::OptionalFileEntryRef File,
                          llvm::StringRef SearchPath, llvm::StringRef,
                          const clang::Module *, bool,
                          clang::SrcMgr::CharacteristicKind) override;
  void HasInclude(clang::SourceLocation, llvm::StringRef FileName, bool,
                  clang::OptionalFileEntryRef,
                  clang::SrcMgr::CharacteristicKind) override;
  void MacroDefined(const clang::Token &Name,
                    const clang::MacroDirective *) override;
  void MacroUndefined(const clang::Token &Name, const clang::MacroDefinition &,
                      const clang::MacroDirective *) override;

private:
  void lookedUp(llvm::StringRef Name);
  void macro(const clang::Token &Name);

  clang::Preprocessor &PP;
  PreambleFacts &Out;
  llvm::StringSet<> Seen;
};

/// The real path of \p Name as \p PP's file system sees it, or "".
std::string realPathOf(clang::Preprocessor &PP, llvm::StringRef Name);

/// Checks, during a TU's parse with the PCH, that its text before the
/// preamble's last header is what PreambleGuard.h allows.
class PreambleGuard {
public:
  explicit PreambleGuard(const PreambleFacts &Facts) : Facts(Facts) {}
  /// Installs the callbacks and the token watcher on \p PP.
  void attach(clang::Preprocessor &PP);
  /// After the parse: "" when the TU may use the PCH, else why not.
  std::string problem() const;

private:
  friend class GuardCallbacks;
  bool watching(clang::SourceLocation Loc) const;
  void fail(std::string Why);
  void checkMacroUse(const clang::Token &Name);

  const PreambleFacts &Facts;
  clang::Preprocessor *PP = nullptr;
  size_t Next = 0; // the next preamble header the TU must include
  std::string Problem;
};

} // namespace torchtidy

#endif // TORCH_TIDY_DRIVER_PREAMBLEGUARD_H
