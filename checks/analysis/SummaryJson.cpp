//===--- SummaryJson.cpp - torch-tidy -------------------------------------===//
// (in progress: the JSON reader and writer follow)

#include "ExternalSummaries.h"
#include "ProgramModel.h"
#include "clang/Index/USRGeneration.h"

namespace clang::tidy::torch {

std::string usrOf(const Decl &D) {
  llvm::SmallString<128> Buf;
  if (index::generateUSRForDecl(&D, Buf))
    return "";
  return std::string(Buf);
}

std::optional<FunctionSummary>
ExternalSummaries::lookup(const FunctionDecl &, ProgramModel &) const {
  return std::nullopt;
}

std::optional<EntryContext> ExternalSummaries::entry(const FunctionDecl &F) const {
  auto It = Entries.find(usrOf(F));
  if (It == Entries.end())
    return std::nullopt;
  return It->second;
}

} // namespace clang::tidy::torch
