//===--- NonBlockingPageableCheck.cpp - torch-tidy ------------------------===//

#include "NonBlockingPageableCheck.h"
#include "analysis/TensorFlowAnalysis.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "utils/TorchMatchers.h"
#include "clang/Lex/Lexer.h"

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

NonBlockingPageableCheck::NonBlockingPageableCheck(StringRef Name,
                                                   ClangTidyContext *Context)
    : ClangTidyCheck(Name, Context), UserCode(Context),
      RawExtraPinnedAllocators(Options.get("ExtraPinnedAllocators", "")),
      RawExtraFactories(Options.get("ExtraFactories", "")) {
  ApiOptions.ExtraPinnedAllocators = parseNameList(RawExtraPinnedAllocators);
  ApiOptions.ExtraFactories = parseNameList(RawExtraFactories);
}

void NonBlockingPageableCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraPinnedAllocators", RawExtraPinnedAllocators);
  Options.store(Opts, "ExtraFactories", RawExtraFactories);
}

void NonBlockingPageableCheck::registerMatchers(MatchFinder *Finder) {
  UserCode.registerMatchers(Finder);
  registerAnalyzedBodyMatchers(*Finder, *this);
}

/// How a message names the source: its text when short.
static std::string sourceName(const Expr *E, const ASTContext &Ctx) {
  E = stripConversions(E);
  StringRef Text = Lexer::getSourceText(
      CharSourceRange::getTokenRange(E->getSourceRange()),
      Ctx.getSourceManager(), Ctx.getLangOpts());
  if (Text.empty() || Text.size() > 40 || Text.contains('\n'))
    return "the source tensor";
  return ("'" + Text + "'").str();
}

/// `batch.data` / `batch.target` of a torch::data loader's batch.
static bool isLoaderField(const Expr *E) {
  const auto *Member = dyn_cast<MemberExpr>(stripConversions(E));
  return Member && isDataExampleType(Member->getBase()->getType());
}

/// The factory call that initialises the variable \p Source names, when
/// that call is where the analysis says the pageable memory comes from:
/// the one place where `.pin_memory()` can be appended.
static const CallExpr *pinnableFactory(const Expr *Source,
                                       SourceLocation PinOrigin,
                                       const TorchApiOptions &Opts) {
  const auto *Ref = dyn_cast<DeclRefExpr>(stripConversions(Source));
  const auto *Var = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
  if (!Var || !Var->hasLocalStorage() || !Var->getInit())
    return nullptr;
  const auto *Call = dyn_cast<CallExpr>(stripConversions(Var->getInit()));
  const FunctionDecl *FD = Call ? Call->getDirectCallee() : nullptr;
  if (!FD || !isTensorFactory(*FD, Opts) || Call->getExprLoc() != PinOrigin ||
      Call->getBeginLoc().isMacroID() || Call->getEndLoc().isMacroID())
    return nullptr;
  return Call;
}

void NonBlockingPageableCheck::checkCopy(const CallExpr &Call,
                                         const Expr *Source,
                                         const Expr *Destination,
                                         const TensorModel &Model,
                                         const TensorState &State,
                                         ASTContext &Ctx) {
  std::optional<bool> NonBlocking =
      Model.evaluateBool(argumentForParameter(Call, "non_blocking"), State);
  if (!NonBlocking || !*NonBlocking || !Source || !Destination)
    return;
  ValueFacts From = Model.evaluate(Source, State);
  if (From.Pin.Value != Pinning::Pageable || !From.Device.Value.isCPU())
    return;
  DeviceValue To = Model.evaluate(Destination, State).Device.Value;
  if (!To.mayBeCUDA())
    return;
  std::string Name = sourceName(Source, Ctx);
  std::string Where = To.describe();
  if (To.isSymbolic())
    Where += " (CUDA on a machine with a GPU)";
  diag(Call.getExprLoc(),
       "non_blocking copy of %0 to %1 from pageable memory runs "
       "synchronously; pin the source (pin_memory() or "
       "TensorOptions().pinned_memory(true)) for the copy to overlap")
      << Name << Where;
  if (!From.Pin.Origin.isValid())
    return;
  if (isLoaderField(Source)) {
    diag(From.Pin.Origin,
         "%0 comes from a torch::data loader, which collates batches into "
         "pageable memory",
         DiagnosticIDs::Note)
        << Name;
    return;
  }
  DiagnosticBuilder Note = diag(
      From.Pin.Origin, "%0 was allocated in pageable memory here",
      DiagnosticIDs::Note);
  Note << Name;
  // Unsafe, so it rides on the note: pinned memory is a scarce, page-locked
  // resource, and `.pin_memory()` costs one more host copy per allocation.
  if (const CallExpr *Factory =
          pinnableFactory(Source, From.Pin.Origin, ApiOptions))
    Note << FixItHint::CreateInsertion(
        Lexer::getLocForEndOfToken(Factory->getEndLoc(), 0,
                                   Ctx.getSourceManager(), Ctx.getLangOpts()),
        ".pin_memory()");
}

void NonBlockingPageableCheck::check(const MatchFinder::MatchResult &Result) {
  std::optional<AnalyzedBody> Body = getAnalyzedBody(Result);
  if (!Body)
    return;
  std::unique_ptr<TensorFlowAnalysis> Analysis = TensorFlowAnalysis::run(
      *Body->Function, *Body->Body, *Result.Context, ApiOptions);
  if (!Analysis || !Analysis->converged())
    return;
  const TensorModel &Model = Analysis->model();
  ASTContext &Ctx = *Result.Context;

  Analysis->replay([&](const Stmt &S, const TensorState &State) {
    const auto *Call = dyn_cast<CallExpr>(&S);
    if (!Call)
      return;
    StringRef Method = tensorMethodName(*Call);
    if (Method == "to" || Method == "cuda")
      // The result is where the copy lands.
      checkCopy(*Call, memberCallObject(*Call), Call, Model, State, Ctx);
    else if (Method == "copy_" && Call->getNumArgs() >= 1)
      checkCopy(*Call, Call->getArg(0), memberCallObject(*Call), Model, State,
                Ctx);
  });
}

} // namespace clang::tidy::torch
