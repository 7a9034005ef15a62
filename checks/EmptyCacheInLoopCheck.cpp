//===--- EmptyCacheInLoopCheck.cpp - torch-tidy ---------------------------===//

#include "EmptyCacheInLoopCheck.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "api/TorchMatchers.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

EmptyCacheInLoopCheck::EmptyCacheInLoopCheck(StringRef Name,
                                             ClangTidyContext *Context)
    : ClangTidyCheck(Name, Context), UserCode(Context),
      ExtraEmptyCacheFunctions(Options.get("ExtraEmptyCacheFunctions", "")) {}

void EmptyCacheInLoopCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraEmptyCacheFunctions", ExtraEmptyCacheFunctions);
}

void EmptyCacheInLoopCheck::registerMatchers(MatchFinder *Finder) {
  UserCode.registerMatchers(Finder);
  std::vector<StringRef> Names(emptyCacheFunctionNames().begin(),
                               emptyCacheFunctionNames().end());
  for (StringRef Extra :
       utils::options::parseStringList(ExtraEmptyCacheFunctions))
    Names.push_back(Extra);
  Finder->addMatcher(
      callExpr(callee(functionDecl(hasAnyName(Names)))).bind("call"), this);
}

void EmptyCacheInLoopCheck::check(const MatchFinder::MatchResult &Result) {
  const auto *Call = Result.Nodes.getNodeAs<CallExpr>("call");
  EnclosingLoop Where = findEnclosingLoop(*Call, *Result.Context);
  if (!Where.Loop)
    return;
  diag(Call->getBeginLoc(),
       "'emptyCache()' inside a loop synchronises the device and returns "
       "cached blocks with cudaFree every iteration; the next iteration must "
       "cudaMalloc them again and the peak memory stays the same");
  diag(Where.Loop->getBeginLoc(), "the loop that repeats the call",
       DiagnosticIDs::Note);
  if (Where.ViaLambda)
    diag(Where.ViaLambda->getBeginLoc(),
         "called through this lambda, defined inside the loop",
         DiagnosticIDs::Note);
}

} // namespace clang::tidy::torch
