//===--- NonBlockingD2HRaceCheck.h - torch-tidy -----------------*- C++ -*-===//

#ifndef TORCH_TIDY_NONBLOCKINGD2HRACECHECK_H
#define TORCH_TIDY_NONBLOCKINGD2HRACECHECK_H

#include "analysis/TorchApi.h"
#include "clang-tidy/ClangTidyCheck.h"
#include "utils/UserCodeTraversal.h"

namespace clang::tidy::torch {

/// Flags the first host read of the result of a non-blocking device-to-host
/// copy that no synchronisation has completed on every path to the read.
///
/// For the user-facing documentation see:
/// docs/checks/torch-non-blocking-d2h-race.md
class NonBlockingD2HRaceCheck : public ClangTidyCheck {
public:
  NonBlockingD2HRaceCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void registerMatchers(ast_matchers::MatchFinder *Finder) override;
  void check(const ast_matchers::MatchFinder::MatchResult &Result) override;
  bool isLanguageVersionSupported(const LangOptions &LangOpts) const override {
    return LangOpts.CPlusPlus;
  }

private:
  UserCodeTraversal UserCode;
  const StringRef RawExtraSyncFunctions;
  TorchApiOptions ApiOptions;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_NONBLOCKINGD2HRACECHECK_H
