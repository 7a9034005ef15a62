//===--- NonBlockingPageableCheck.cpp - torch-tidy ------------------------===//

#include "NonBlockingPageableCheck.h"
#include "model/SummaryBuilder.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "api/TorchMatchers.h"
#include "clang/Lex/Lexer.h"

namespace clang::tidy::torch {

NonBlockingPageableCheck::NonBlockingPageableCheck(StringRef Name,
                                                   ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawExtraPinnedAllocators(Options.get("ExtraPinnedAllocators", "")),
      RawExtraFactories(Options.get("ExtraFactories", "")) {
  ApiOptions.ExtraPinnedAllocators = parseNameList(RawExtraPinnedAllocators);
  ApiOptions.ExtraFactories = parseNameList(RawExtraFactories);
}

void NonBlockingPageableCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraPinnedAllocators", RawExtraPinnedAllocators);
  Options.store(Opts, "ExtraFactories", RawExtraFactories);
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

/// Pageable CPU memory copied to a device that may be CUDA.
static bool isPageableUpload(const ValueFacts &From, const DeviceValue &To) {
  return From.Pin.Value == Pinning::Pageable && From.Device.Value.isCPU() &&
         To.mayBeCUDA();
}

static std::string destination(const DeviceValue &To) {
  std::string Where = To.describe();
  if (To.isSymbolic())
    Where += " (CUDA on a machine with a GPU)";
  return Where;
}

void NonBlockingPageableCheck::report(SourceLocation Loc, const Expr *Source,
                                      const ValueFacts &From,
                                      const Sourced<DeviceValue> &To,
                                      const ASTContext &Ctx) {
  if (!firstAt(Loc))
    return;
  std::string Name = quotedSource(Source, Ctx, "the source tensor");
  diag(Loc, "non_blocking copy of %0%1 to %2 from pageable memory runs "
            "synchronously; pin the source (pin_memory() or "
            "TensorOptions().pinned_memory(true)) for the copy to overlap")
      << Name << fromWhere(From.Pin, Ctx) << destination(To.Value);
  if (!From.Pin.Origin.isValid())
    return;
  notePath(From.Pin.Via, Name);
  if (isLoaderField(Source) && !From.Pin.Via) {
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
          From.Pin.Via ? nullptr
                       : pinnableFactory(Source, From.Pin.Origin, ApiOptions))
    Note << FixItHint::CreateInsertion(
        Lexer::getLocForEndOfToken(Factory->getEndLoc(), 0,
                                   Ctx.getSourceManager(), Ctx.getLangOpts()),
        ".pin_memory()");
}

void NonBlockingPageableCheck::checkRequirement(
    const CallExpr &Call, const InstantiatedRequirement &I,
    ProgramModel &Program) {
  const Requirement &R = *I.Req;
  if (R.Kind != Requirement::PinnedSource || !I.First.Argument ||
      !isPageableUpload(I.First.Facts, I.Second.Facts.Device.Value))
    return;
  report(Call.getExprLoc(), I.First.Argument, I.First.Facts,
         I.Second.Facts.Device, Program.context());
  for (const CallStep *Step = R.Via; Step; Step = Step->Next)
    diag(Step->Call, "which calls %0 here", DiagnosticIDs::Note)
        << Step->Callee;
  diag(R.At, "the non_blocking copy is made here", DiagnosticIDs::Note);
}

void NonBlockingPageableCheck::checkBody(const FunctionDecl &,
                                         const TensorFlowAnalysis &Analysis,
                                         ProgramModel &Program) {
  const TensorModel &Model = Analysis.model();
  const ASTContext &Ctx = Program.context();
  Analysis.replay([&](const Stmt &S, const TensorState &State) {
    const auto *Call = dyn_cast<CallExpr>(&S);
    if (!Call)
      return;
    for (const InstantiatedRequirement &I : requirementsAt(*Call, Model, State))
      checkRequirement(*Call, I, Program);
    TensorCopy Copy;
    if (!matchTensorCopy(S, Copy) || !Copy.Source || !Copy.Destination)
      return;
    std::optional<bool> NonBlocking = Model.evaluateBool(
        argumentForParameter(*Call, "non_blocking"), State);
    if (!NonBlocking || !*NonBlocking)
      return;
    ValueFacts From = Model.evaluate(Copy.Source, State);
    Sourced<DeviceValue> To = Model.evaluate(Copy.Destination, State).Device;
    if (isPageableUpload(From, To.Value))
      report(Call->getExprLoc(), Copy.Source, From, To, Ctx);
  });
}

} // namespace clang::tidy::torch
