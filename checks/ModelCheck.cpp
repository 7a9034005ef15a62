//===--- ModelCheck.cpp - torch-tidy --------------------------------------===//

#include "ModelCheck.h"
#include "api/TorchMatchers.h"
#include "llvm/Support/Path.h"

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

ModelCheck::ModelCheck(StringRef Name, ClangTidyContext *Context)
    : ClangTidyCheck(Name, Context), UserCode(Context),
      Config(modelConfigFor(*Context)) {}

void ModelCheck::registerMatchers(MatchFinder *Finder) {
  UserCode.registerMatchers(Finder);
  registerAnalyzedBodyMatchers(*Finder, *this);
  Finder->addMatcher(varDecl(hasGlobalStorage(), hasInitializer(expr()),
                             unless(isExpansionInSystemHeader()),
                             unless(hasAncestor(functionDecl())))
                         .bind("global"),
                     this);
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
    Program = ProgramModel::get(Ctx, Config);
  return *Program;
}

void ModelCheck::check(const MatchFinder::MatchResult &Result) {
  ProgramModel &P = program(*Result.Context);
  if (const auto *Global = Result.Nodes.getNodeAs<VarDecl>("global")) {
    if (!Global->isStaticLocal() && !Global->getDeclContext()->isDependentContext())
      checkFunction(*Global, P);
    return;
  }
  const FunctionDecl *F = getAnalyzedFunction(Result);
  if (!F || !P.isAnalyzable(*F))
    return;
  checkFunction(*F, P);
}

void ModelCheck::checkFunction(const Decl &Owner, ProgramModel &P) {
  if (!Kind)
    return;
  for (const Violation &V : P.violations(Owner))
    if (V.Kind == Kind)
      report(V, P);
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

void ModelCheck::noteIntoCallee(const Violation &V, StringRef AtMatch) {
  if (!V.FromCallee)
    return;
  for (const CallStep *Step = V.FromCallee->Via; Step; Step = Step->Next)
    diag(Step->Call, "which calls %0 here", DiagnosticIDs::Note)
        << Step->Callee;
  if (V.FromCallee->At.isValid())
    diag(V.FromCallee->At, AtMatch, DiagnosticIDs::Note) << V.Match.What;
}

std::string ModelCheck::nameOf(const Operand &Op, const ASTContext &Ctx,
                               StringRef Fallback, size_t MaxLength) const {
  if (Op.Source)
    return quotedSource(Op.Source, Ctx, Fallback, MaxLength);
  return Op.Name.empty() ? Fallback.str() : Op.Name;
}

SourceLocation ModelCheck::locationOf(const Violation &V, bool InCallee) const {
  if (V.FromCallee && InCallee)
    return V.FromCallee->At;
  if (const auto *E = dyn_cast<Expr>(V.Site))
    return E->getExprLoc();
  return V.Site->getBeginLoc();
}

} // namespace clang::tidy::torch
