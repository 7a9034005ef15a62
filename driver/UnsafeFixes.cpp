//===--- UnsafeFixes.cpp - torch-tidy driver ------------------------------===//

#include "UnsafeFixes.h"

using namespace llvm;
using clang::tidy::ClangTidyError;

namespace torchtidy {

std::vector<Finding> noteFixFindings(ArrayRef<ClangTidyError> Errors) {
  std::vector<Finding> Out;
  SourceCache Sources;
  for (const ClangTidyError &E : Errors) {
    if (!E.Message.Fix.empty())
      continue; // --fix applies the warning's own fix-it
    const clang::tooling::DiagnosticMessage *WithFix = nullptr;
    unsigned NotesWithFix = 0;
    for (const clang::tooling::DiagnosticMessage &Note : E.Notes)
      if (!Note.Fix.empty()) {
        WithFix = &Note;
        ++NotesWithFix;
      }
    // Two notes with fix-its are alternatives, not one fix.
    if (NotesWithFix != 1)
      continue;
    ClangTidyError Copy = E;
    Copy.Message.Fix = WithFix->Fix;
    Out.push_back(toFinding(Copy, Sources));
  }
  return Out;
}

} // namespace torchtidy
