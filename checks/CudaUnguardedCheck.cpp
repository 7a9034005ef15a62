//===--- CudaUnguardedCheck.cpp - torch-tidy ------------------------------===//

#include "CudaUnguardedCheck.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "utils/TorchMatchers.h"
#include "clang/AST/ExprCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

CudaUnguardedCheck::CudaUnguardedCheck(StringRef Name,
                                       ClangTidyContext *Context)
    : ClangTidyCheck(Name, Context), UserCode(Context),
      GuardFunctions(Options.get("GuardFunctions", "")),
      DeviceSelectorFunctions(Options.get("DeviceSelectorFunctions", "")) {
  GuardOptions.GuardFunctions = parseNameList(GuardFunctions);
  GuardOptions.DeviceSelectorFunctions = parseNameList(DeviceSelectorFunctions);
}

void CudaUnguardedCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "GuardFunctions", GuardFunctions);
  Options.store(Opts, "DeviceSelectorFunctions", DeviceSelectorFunctions);
}

void CudaUnguardedCheck::registerMatchers(MatchFinder *Finder) {
  UserCode.registerMatchers(Finder);
  // The analysis walks the TU's user code itself, once, and keeps the
  // parents it needs per function; a node matcher here would run on every
  // node of LibTorch's headers and the TU-wide parent map would cost more
  // than the whole analysis.
  Finder->addMatcher(translationUnitDecl().bind("tu"), this);
}

void CudaUnguardedCheck::check(const MatchFinder::MatchResult &Result) {
  ASTContext &Ctx = *Result.Context;
  CudaAvailabilityGuard Guard(Ctx, GuardOptions);
  const SourceManager &SM = Ctx.getSourceManager();
  for (const CudaAvailabilityGuard::Finding &F :
       Guard.findUnguardedSelections()) {
    diag(F.Loc, "CUDA device selected without checking "
                "torch::cuda::is_available(); this crashes on a machine "
                "without a working CUDA");
    if (F.NonDominatingGuard)
      diag(SM.getExpansionLoc(F.NonDominatingGuard->getBeginLoc()),
           "an availability check here does not protect this use",
           DiagnosticIDs::Note);
    if (F.UnguardedCallSite)
      diag(SM.getExpansionLoc(F.UnguardedCallSite->getBeginLoc()),
           "reached from here without a check", DiagnosticIDs::Note);
  }
}

} // namespace clang::tidy::torch
