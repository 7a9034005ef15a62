//===--- NonBlockingD2HRaceCheck.cpp - torch-tidy -------------------------===//

#include "NonBlockingD2HRaceCheck.h"
#include "analysis/TensorFlowAnalysis.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "utils/TorchMatchers.h"
#include "clang/Lex/Lexer.h"

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

NonBlockingD2HRaceCheck::NonBlockingD2HRaceCheck(StringRef Name,
                                                 ClangTidyContext *Context)
    : ClangTidyCheck(Name, Context), UserCode(Context),
      RawExtraSyncFunctions(Options.get("ExtraSyncFunctions", "")) {
  ApiOptions.ExtraSyncFunctions = parseNameList(RawExtraSyncFunctions);
}

void NonBlockingD2HRaceCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraSyncFunctions", RawExtraSyncFunctions);
}

void NonBlockingD2HRaceCheck::registerMatchers(MatchFinder *Finder) {
  UserCode.registerMatchers(Finder);
  registerAnalyzedBodyMatchers(*Finder, *this);
}

static std::string readName(const Expr *E, const ASTContext &Ctx) {
  StringRef Text = Lexer::getSourceText(
      CharSourceRange::getTokenRange(E->getSourceRange()),
      Ctx.getSourceManager(), Ctx.getLangOpts());
  if (Text.empty() || Text.size() > 40 || Text.contains('\n'))
    return "the tensor";
  return ("'" + Text + "'").str();
}

void NonBlockingD2HRaceCheck::check(const MatchFinder::MatchResult &Result) {
  std::optional<AnalyzedBody> Body = getAnalyzedBody(Result);
  if (!Body)
    return;
  std::unique_ptr<TensorFlowAnalysis> Analysis = TensorFlowAnalysis::run(
      *Body->Function, *Body->Body, *Result.Context, ApiOptions);
  if (!Analysis || !Analysis->converged())
    return;
  const TensorModel &Model = Analysis->model();
  const ASTContext &Ctx = *Result.Context;

  Analysis->replay([&](const Stmt &S, const TensorState &State) {
    llvm::SmallVector<const Expr *, 2> Reads;
    TensorModel::hostReadOperands(S, Reads);
    for (const Expr *Read : Reads) {
      const ValueFacts *F = State.lookup(Model.keyOf(Read));
      if (!F || !F->PendingDeviceToHostCopy)
        continue;
      diag(Read->getBeginLoc(),
           "%0 is read on the host before the non-blocking device-to-host "
           "copy that produced it has completed; synchronise first (e.g. "
           "torch::cuda::synchronize() or stream.synchronize())")
          << readName(Read, Ctx);
      diag(F->PendingDeviceToHostCopy->getExprLoc(),
           "non-blocking copy to the host starts here", DiagnosticIDs::Note);
      return; // One warning per read.
    }
  });
}

} // namespace clang::tidy::torch
