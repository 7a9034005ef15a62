//===--- ModelCheck.cpp - torch-tidy --------------------------------------===//

#include "ModelCheck.h"
#include "llvm/Support/Path.h"

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

ModelCheck::ModelCheck(StringRef Name, ClangTidyContext *Context)
    : ClangTidyCheck(Name, Context), UserCode(Context) {}

void ModelCheck::registerMatchers(MatchFinder *Finder) {
  UserCode.registerMatchers(Finder);
  registerAnalyzedBodyMatchers(*Finder, *this);
}

void ModelCheck::onStartOfTranslationUnit() {
  Program.reset();
  Reported.clear();
}

void ModelCheck::onEndOfTranslationUnit() {
  Program.reset();
  Reported.clear();
}

ProgramModel &ModelCheck::program(ASTContext &Ctx) {
  if (!Program || &Program->context() != &Ctx)
    Program = ProgramModel::get(Ctx, ApiOptions);
  return *Program;
}

void ModelCheck::check(const MatchFinder::MatchResult &Result) {
  std::optional<AnalyzedBody> Body = getAnalyzedBody(Result);
  if (!Body)
    return;
  ProgramModel &P = program(*Result.Context);
  if (!P.isAnalyzable(*Body->Function))
    return;
  if (const TensorFlowAnalysis *Analysis = P.analysis(*Body->Function))
    checkBody(*Body->Function, *Analysis, P);
}

bool ModelCheck::firstAt(SourceLocation Loc) {
  return Reported.insert(Loc).second;
}

std::string ModelCheck::fromWhere(const CallStep *Via, SourceLocation Origin,
                                  const ASTContext &Ctx) const {
  if (!Via)
    return "";
  std::string Out = " (from " + Via->Callee.str();
  const SourceManager &SM = Ctx.getSourceManager();
  PresumedLoc P = SM.getPresumedLoc(SM.getExpansionLoc(Origin));
  if (P.isValid())
    Out += " at " + llvm::sys::path::filename(P.getFilename()).str() + ":" +
           std::to_string(P.getLine());
  return Out + ")";
}

void ModelCheck::notePath(const CallStep *Via, StringRef Name) {
  for (const CallStep *Step = Via; Step; Step = Step->Next)
    diag(Step->Call, "%0 comes from the call of %1 here", DiagnosticIDs::Note)
        << Name << Step->Callee;
}

} // namespace clang::tidy::torch
