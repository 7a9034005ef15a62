//===--- NonBlockingPageableCheck.cpp - torch-tidy ------------------------===//
//
// The requirement: the source of a non_blocking copy to a device that may be
// CUDA is not pageable CPU memory.
//
//===----------------------------------------------------------------------===//

#include "NonBlockingPageableCheck.h"
#include "api/TorchMatchers.h"
#include "model/FlowModel.h"
#include "support/FixIts.h"

namespace clang::tidy::torch {

namespace {

class PinnedSource : public Requirement {
public:
  llvm::StringRef name() const override { return "pinned-source"; }

  bool match(const Stmt &S, const FlowModel &M, const State &St,
             RequirementMatch &Out) const override {
    TensorCopy Copy;
    if (!matchTensorCopy(S, Copy) || !Copy.Source || !Copy.Destination)
      return false;
    std::optional<bool> NonBlocking =
        M.evaluateBool(argumentForParameter(*Copy.Call, "non_blocking"), St);
    if (!NonBlocking || !*NonBlocking)
      return false;
    const ASTContext &Ctx = M.context();
    Out.Operands.push_back({M.evaluate(Copy.Source, St),
                            quotedSource(Copy.Source, Ctx, "the source tensor"),
                            Copy.Source});
    ValueFacts To;
    To.Device = M.evaluate(Copy.Destination, St).Device;
    Out.Operands.push_back({To, "", nullptr});
    return true;
  }

  Verdict judge(const RequirementMatch &M, const SiteContext &) const override {
    const ValueFacts &From = M.Operands[0].Facts;
    const Sourced<DeviceValue> &To = M.Operands[1].Facts.Device;
    if (isCallerEntry(From.Pin)) {
      // The parameter's own memory, on the CPU or wherever it was.
      bool Own = From.Device.Entry == From.Pin.Entry || From.Device.Value.isCPU();
      return Own && (To.Value.mayBeCUDA() || isCallerEntry(To))
                 ? Verdict::Callers
                 : Verdict::Holds;
    }
    if (isCallerEntry(To))
      return From.Pin.Value == Pinning::Pageable && From.Device.Value.isCPU()
                 ? Verdict::Callers
                 : Verdict::Holds;
    return From.Pin.Value == Pinning::Pageable && From.Device.Value.isCPU() &&
                   To.Value.mayBeCUDA()
               ? Verdict::Violated
               : Verdict::Holds;
  }
};

const PinnedSource Instance;
const RequirementRegistration Registered(Instance);

/// The factory call that initialises the variable \p Source names, when
/// that call is where the pageable memory comes from: the one place where
/// `.pin_memory()` can be appended.
const CallExpr *pinnableFactory(const Expr *Source, SourceLocation PinOrigin,
                                const TorchApiOptions &Opts) {
  const auto *Ref =
      Source ? dyn_cast<DeclRefExpr>(stripConversions(Source)) : nullptr;
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

} // namespace

NonBlockingPageableCheck::NonBlockingPageableCheck(StringRef Name,
                                                   ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawExtraPinnedAllocators(Options.get("ExtraPinnedAllocators", "")),
      RawExtraFactories(Options.get("ExtraFactories", "")) {
  Kind = &Instance;
}

void NonBlockingPageableCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraPinnedAllocators", RawExtraPinnedAllocators);
  Options.store(Opts, "ExtraFactories", RawExtraFactories);
}

void NonBlockingPageableCheck::report(const Violation &V,
                                      ProgramModel &Program) {
  const Operand &Source = V.Match.Operands[0];
  // A helper copies the tensor it is given (the call is wrong), but a part
  // of what it is given is data it chose (the copy is).
  bool AtCopy = V.FromCallee && Source.isPart();
  SourceLocation Loc = locationOf(V, AtCopy);
  if (!firstAt(Loc))
    return;
  const ASTContext &Ctx = Program.context();
  const ValueFacts &From = Source.Facts;
  const DeviceValue &To = V.Match.Operands[1].Facts.Device.Value;
  std::string Name = nameOf(Source, Ctx, "the source tensor");
  std::string Where = To.describe();
  if (To.isSymbolic())
    Where += " (CUDA on a machine with a GPU)";
  diag(Loc, "non_blocking copy of %0%1 to %2 from pageable memory runs "
            "synchronously; pin the source (pin_memory() or "
            "TensorOptions().pinned_memory(true)) for the copy to overlap")
      << Name << fromWhere(From.Pin, Ctx) << Where;
  if (From.Pin.Origin.isValid()) {
    notePath(From.Pin.Via, Name);
    if (Source.Source && !From.Pin.Via &&
        loaderBatchOrigin(*stripConversions(Source.Source), Program.context())
            .isValid()) {
      diag(From.Pin.Origin,
           "%0 comes from a torch::data loader, which collates batches into "
           "pageable memory",
           DiagnosticIDs::Note)
          << Name;
    } else {
      DiagnosticBuilder Note =
          diag(From.Pin.Origin, "%0 was allocated in pageable memory here",
               DiagnosticIDs::Note);
      Note << Name;
      // Unsafe, so it rides on the note: pinned memory is a scarce,
      // page-locked resource, and `.pin_memory()` costs one more host copy.
      if (const CallExpr *Factory =
              From.Pin.Via ? nullptr
                           : pinnableFactory(Source.Source, From.Pin.Origin,
                                             Program.options()))
        for (const FixItHint &Fix : callOnValue(*Factory, ".pin_memory()", Ctx))
          Note << Fix;
    }
  }
  if (AtCopy)
    diag(locationOf(V, /*InCallee=*/false), "called from here",
         DiagnosticIDs::Note);
  else
    noteIntoCallee(V, "the non_blocking copy is made here");
}

} // namespace clang::tidy::torch
