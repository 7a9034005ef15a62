//===--- PreambleGuard.cpp - torch-tidy driver ----------------------------===//

#include "PreambleGuard.h"

#include "clang/Basic/SourceManager.h"
#include "clang/Lex/MacroInfo.h"
#include "clang/Lex/Preprocessor.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

using namespace clang;
using namespace llvm;

namespace torchtidy {

//===----------------------------------------------------------------------===//
// While the PCH is built
//===----------------------------------------------------------------------===//

std::string realPathOf(Preprocessor &PP, StringRef Name) {
  SmallString<256> Real;
  if (PP.getFileManager().getVirtualFileSystem().getRealPath(Name, Real))
    return "";
  return std::string(Real);
}

void PreambleRecorder::InclusionDirective(
    SourceLocation HashLoc, const Token &, StringRef FileName, bool IsAngled,
    CharSourceRange, OptionalFileEntryRef File, StringRef SearchPath,
    StringRef, const Module *, bool, SrcMgr::CharacteristicKind) {
  const SourceManager &SM = PP.getSourceManager();
  if (File && SM.isInMainFile(HashLoc))
    Out.Headers.push_back(realPathOf(PP, File->getName()));
  // A quoted name found next to the includer is found there whatever the
  // include dirs are.
  if (!IsAngled && File) {
    OptionalFileEntryRef Includer =
        SM.getFileEntryRefForID(SM.getFileID(SM.getExpansionLoc(HashLoc)));
    if (Includer && sys::path::parent_path(Includer->getName()) == SearchPath)
      return;
  }
  lookedUp(FileName);
}

void PreambleRecorder::HasInclude(SourceLocation, StringRef FileName, bool,
                                  OptionalFileEntryRef,
                                  SrcMgr::CharacteristicKind) {
  lookedUp(FileName);
}

void PreambleRecorder::lookedUp(StringRef Name) {
  if (!Name.empty() && !sys::path::is_absolute(Name) &&
      Seen.insert(Name).second)
    Out.Lookups.push_back(Name.str());
}

void PreambleRecorder::macro(const Token &Name) {
  const SourceManager &SM = PP.getSourceManager();
  // The command line's macros are the same in every TU that shares the PCH.
  FileID File = SM.getFileID(SM.getExpansionLoc(Name.getLocation()));
  if (File != PP.getPredefinesFileID())
    Out.Macros.insert(Name.getIdentifierInfo()->getName());
}

void PreambleRecorder::MacroDefined(const Token &Name, const MacroDirective *) {
  macro(Name);
}

void PreambleRecorder::MacroUndefined(const Token &Name,
                                      const MacroDefinition &,
                                      const MacroDirective *) {
  macro(Name);
}

//===----------------------------------------------------------------------===//
// While a TU is parsed with the PCH
//===----------------------------------------------------------------------===//

class GuardCallbacks : public PPCallbacks {
public:
  explicit GuardCallbacks(PreambleGuard &G) : G(G) {}

  void InclusionDirective(SourceLocation HashLoc, const Token &,
                          StringRef FileName, bool IsAngled, CharSourceRange,
                          OptionalFileEntryRef File, StringRef, StringRef,
                          const Module *, bool,
                          SrcMgr::CharacteristicKind FileType) override {
    if (!G.watching(HashLoc))
      return;
    std::string Spelled =
        (IsAngled ? "<" + FileName + ">" : "\"" + FileName + "\"").str();
    if (!File)
      return G.fail(Spelled + " is not found");
    if (!SrcMgr::isSystem(FileType))
      return; // a project header: its directives are watched in turn
    ArrayRef<std::string> Headers = G.Facts.Headers;
    std::string Real = realPathOf(*G.PP, File->getName());
    if (Real == Headers[G.Next])
      ++G.Next;
    else if (!llvm::is_contained(Headers.take_front(G.Next), Real))
      G.fail("it includes " + Spelled + " where the precompiled header "
             "includes '" + Headers[G.Next] + "'");
    // else included again, and skipped by its guard as in the PCH
  }
  void MacroDefined(const Token &Name, const MacroDirective *) override {
    definedOrUndefined(Name, "#define");
  }
  void MacroUndefined(const Token &Name, const MacroDefinition &,
                      const MacroDirective *) override {
    definedOrUndefined(Name, "#undef");
  }
  void MacroExpands(const Token &Name, const MacroDefinition &, SourceRange,
                    const MacroArgs *) override {
    G.checkMacroUse(Name);
  }
  void Defined(const Token &Name, const MacroDefinition &,
               SourceRange) override {
    G.checkMacroUse(Name);
  }
  void Ifdef(SourceLocation, const Token &Name,
             const MacroDefinition &) override {
    G.checkMacroUse(Name);
  }
  void Ifndef(SourceLocation, const Token &Name,
              const MacroDefinition &) override {
    G.checkMacroUse(Name);
  }
  void Elifdef(SourceLocation, const Token &Name,
               const MacroDefinition &) override {
    G.checkMacroUse(Name);
  }
  void Elifndef(SourceLocation, const Token &Name,
                const MacroDefinition &) override {
    G.checkMacroUse(Name);
  }
  void PragmaDirective(SourceLocation Loc,
                       PragmaIntroducerKind Introducer) override {
    if (!G.watching(Loc))
      return;
    // `#pragma once` only: a pragma may change what follows (pack,
    // diagnostics, `clang attribute`, ...).
    const SourceManager &SM = G.PP->getSourceManager();
    bool Invalid = false;
    StringRef Rest = SM.getCharacterData(Loc, &Invalid);
    Rest = Rest.take_until([](char C) { return C == '\n'; });
    Rest.consume_front("#");
    Rest = Rest.ltrim(" \t");
    bool Once = !Invalid && Introducer == PIK_HashPragma &&
                Rest.consume_front("pragma") &&
                Rest.ltrim(" \t").rtrim(" \t\r") == "once";
    if (!Once)
      G.fail("a #pragma comes before its headers");
  }

private:
  void definedOrUndefined(const Token &Name, StringRef Directive) {
    if (!G.watching(Name.getLocation()))
      return;
    StringRef Macro = Name.getIdentifierInfo()->getName();
    if (G.Facts.Words.contains(Macro))
      G.fail(formatv("'{0} {1}' comes before its headers, which mention "
                     "'{1}'",
                     Directive, Macro)
                 .str());
  }

  PreambleGuard &G;
};

void PreambleGuard::attach(Preprocessor &P) {
  PP = &P;
  P.addPPCallbacks(std::make_unique<GuardCallbacks>(*this));
  P.setTokenWatcher([this](const Token &T) {
    if (Next < Facts.Headers.size() && Problem.empty())
      fail(T.is(tok::eof) ? "it does not include all of its headers"
                          : "code comes before its headers");
  });
}

bool PreambleGuard::watching(SourceLocation Loc) const {
  if (Next >= Facts.Headers.size() || !Problem.empty() || Loc.isInvalid())
    return false;
  const SourceManager &SM = PP->getSourceManager();
  FileID File = SM.getFileID(SM.getExpansionLoc(Loc));
  // The command line's macros (the predefines buffer) are the PCH's too.
  return File != PP->getPredefinesFileID() && SM.getFileEntryRefForID(File);
}

void PreambleGuard::fail(std::string Why) {
  if (Problem.empty())
    Problem = std::move(Why);
}

void PreambleGuard::checkMacroUse(const Token &Name) {
  if (!watching(Name.getLocation()))
    return;
  StringRef Macro = Name.getIdentifierInfo()->getName();
  if (Facts.Macros.contains(Macro))
    fail(("it uses the macro '" + Macro + "' before its headers, which "
          "define it")
             .str());
}

std::string PreambleGuard::problem() const {
  if (!Problem.empty() || Next == Facts.Headers.size())
    return Problem;
  return "it does not include all of its headers";
}

} // namespace torchtidy
