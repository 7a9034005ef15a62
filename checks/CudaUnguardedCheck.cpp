//===--- CudaUnguardedCheck.cpp - torch-tidy ------------------------------===//

#include "CudaUnguardedCheck.h"
#include "model/ProgramModel.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "api/TorchMatchers.h"
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
  std::shared_ptr<ProgramModel> Program =
      ProgramModel::get(Ctx, TorchApiOptions());
  CudaAvailabilityGuard Guard(Ctx, GuardOptions, Program.get());
  const SourceManager &SM = Ctx.getSourceManager();
  std::vector<CudaAvailabilityGuard::Finding> Findings =
      Guard.findUnguardedSelections();
  // One warning per unguarded path, at its first use; the path's other
  // uses are its notes.
  llvm::DenseMap<const void *, llvm::SmallVector<size_t, 4>> ByPath;
  llvm::SmallVector<const void *, 8> Paths;
  for (size_t I = 0; I < Findings.size(); ++I) {
    auto &Members = ByPath[Findings[I].Root];
    if (Members.empty())
      Paths.push_back(Findings[I].Root);
    Members.push_back(I);
  }
  for (const void *Path : Paths) {
    llvm::ArrayRef<size_t> Members = ByPath[Path];
    const CudaAvailabilityGuard::Finding &F = Findings[Members.front()];
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
    for (size_t I : Members.drop_front())
      diag(Findings[I].Loc, "CUDA is selected here too, on the same path",
           DiagnosticIDs::Note);
  }
}

} // namespace clang::tidy::torch
