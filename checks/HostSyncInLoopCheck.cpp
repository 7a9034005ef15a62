//===--- HostSyncInLoopCheck.cpp - torch-tidy -----------------------------===//
//
// What it watches for: a host-device synchronisation (`.item()`, `.cpu()`, a
// blocking `.to(<CPU>)`, streaming a tensor, a synchronize call) of a tensor
// that may be on CUDA, run on every iteration of a training loop: in the
// loop itself, or in a function that the loop calls on every iteration.
//
//===----------------------------------------------------------------------===//

#include "HostSyncInLoopCheck.h"
#include "api/TorchMatchers.h"

namespace clang::tidy::torch {

namespace {

class HostSyncPerStep : public Requirement {
public:
  llvm::StringRef name() const override { return "host-sync-per-step"; }

  bool match(const Stmt &S, const FlowModel &M, const State &St,
             RequirementMatch &Out) const override {
    const auto *Call = dyn_cast<CallExpr>(&S);
    HostSync Sync;
    if (!Call || !M.matchHostSync(*Call, St, Sync))
      return false;
    const ASTContext &Ctx = M.context();
    const Expr *Tensor = Sync.Tensor;
    Out.Flags = Sync.How;
    if (Sync.How == HostSync::Print)
      Out.What = quotedSource(Tensor, Ctx, "a tensor", 48);
    else if (Sync.How == HostSync::Synchronize)
      Out.What = quotedSource(Call, Ctx, "synchronize()", 48);
    else
      Out.What = quotedSource(
          Call, Ctx, ("'." + tensorMethodName(*Call) + "()'").str(), 48);
    if (Tensor)
      Out.Operands.push_back({M.evaluate(Tensor, St),
                              quotedSource(Tensor, Ctx, "the tensor", 48),
                              Tensor});
    return true;
  }

  Verdict judge(const RequirementMatch &M,
                const SiteContext &C) const override {
    bool Callers = false;
    if (!M.Operands.empty()) {
      const Sourced<DeviceValue> &D = M.Operands[0].Facts.Device;
      if (isCallerEntry(D))
        Callers = true;
      else if (!D.Value.mayBeCUDA())
        return Verdict::Holds;
    }
    if (C.Loop.TrainingLoop.isInvalid())
      return C.Loop.EveryCall ? Verdict::Callers : Verdict::Holds;
    return Callers ? Verdict::Callers : Verdict::Violated;
  }
};

const HostSyncPerStep Instance;
const RequirementRegistration Registered(Instance);

} // namespace

HostSyncInLoopCheck::HostSyncInLoopCheck(StringRef Name,
                                         ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawTrainingStepFunctions(Options.get("TrainingStepFunctions", "")),
      RawExtraSyncFunctions(Options.get("ExtraSyncFunctions", "")),
      MaxLoopDepth(std::max(1u, Options.get("MaxLoopDepth", 1u))) {
  Kind = &Instance;
}

void HostSyncInLoopCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "TrainingStepFunctions", RawTrainingStepFunctions);
  Options.store(Opts, "ExtraSyncFunctions", RawExtraSyncFunctions);
  Options.store(Opts, "MaxLoopDepth", MaxLoopDepth);
}

void HostSyncInLoopCheck::report(const Violation &V, ProgramModel &Program) {
  SourceLocation Loc = locationOf(V, /*InCallee=*/true);
  if (!firstAt(Loc))
    return;
  const ASTContext &Ctx = Program.context();
  const Operand *Tensor = V.Match.Operands.empty() ? nullptr : &V.Match.Operands[0];
  std::string When;
  if (Tensor && Tensor->Facts.Device.Value.isSymbolic())
    When = " where " + Tensor->Facts.Device.Value.describe() + " is CUDA";
  switch (V.Match.Flags) {
  case HostSync::Print:
    diag(Loc, "printing %0 copies it to the host and synchronises with the "
              "GPU on every training step%1; the GPU idles while the host "
              "waits; print under a condition (e.g. every N steps) or "
              "accumulate on the device")
        << V.Match.What << When;
    break;
  case HostSync::Synchronize:
    diag(Loc, "%0 blocks the host until the GPU is idle on every training "
              "step; the GPU idles while the host launches the next kernels; "
              "synchronise under a condition (e.g. every N steps) or not at "
              "all")
        << V.Match.What;
    break;
  default:
    diag(Loc, "%0 synchronises the host with the GPU on every training "
              "step%1; the GPU idles while the host waits; sync under a "
              "condition (e.g. every N steps) or accumulate on the device")
        << V.Match.What << When;
    break;
  }
  if (V.FromCallee)
    diag(locationOf(V, /*InCallee=*/false),
         "called on every training step from here", DiagnosticIDs::Note);
  if (V.Context.Loop.TrainingCall.isValid())
    diag(V.Context.Loop.TrainingCall,
         "inside this training loop, which calls '%0'", DiagnosticIDs::Note)
        << V.Context.Loop.TrainingCallee;
  if (Tensor)
    noteFact(Tensor->Facts.Device, nameOf(*Tensor, Ctx, "the tensor", 48),
             "%0 is on %1 from here", Tensor->Facts.Device.Value.describe());
}

} // namespace clang::tidy::torch
