//===--- HostSyncInLoopCheck.cpp - torch-tidy -----------------------------===//
//
// A synchronisation is reported when three things hold:
//  1. it is a host-device sync: `.item()`, `.cpu()`, a blocking
//     `.to(<CPU>)`, `<<` of a tensor into a std::ostream on a tensor that the
//     flow analysis proves to be on CUDA or on a device variable that may hold
//     CUDA; or a synchronize call (isSynchronizeCall), which needs no tensor;
//  2. one of the MaxLoopDepth innermost loops that repeat it is a training
//     loop: its body calls `backward()`, an optimizer's `step()` or one of the
//     TrainingStepFunctions (recognised by utils/TrainingLoop.h), outside any
//     nested loop or lambda;
//  3. it runs on every iteration of that loop: no if/switch/?:/&&/||/catch,
//     lambda or function boundary lies between it and the loop, no
//     `continue` of a loop on that path comes before it, and the training
//     loop contains no goto.
//
//===----------------------------------------------------------------------===//

#include "HostSyncInLoopCheck.h"
#include "model/TrainingLoopRepeats.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "api/TorchMatchers.h"
#include "model/TrainingLoop.h"
#include "model/UserCodeParents.h"
#include "llvm/ADT/DenseMap.h"

namespace clang::tidy::torch {

HostSyncInLoopCheck::HostSyncInLoopCheck(StringRef Name,
                                         ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawTrainingStepFunctions(Options.get("TrainingStepFunctions", "")),
      RawExtraSyncFunctions(Options.get("ExtraSyncFunctions", "")),
      MaxLoopDepth(std::max(1u, Options.get("MaxLoopDepth", 1u))) {
  ApiOptions.ExtraStepFunctions = parseNameList(RawTrainingStepFunctions);
  ApiOptions.ExtraSyncFunctions = parseNameList(RawExtraSyncFunctions);
}

void HostSyncInLoopCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "TrainingStepFunctions", RawTrainingStepFunctions);
  Options.store(Opts, "ExtraSyncFunctions", RawExtraSyncFunctions);
  Options.store(Opts, "MaxLoopDepth", MaxLoopDepth);
}

void HostSyncInLoopCheck::checkBody(const FunctionDecl &,
                                    const TensorFlowAnalysis &Analysis,
                                    ProgramModel &Program) {
  const TensorModel &Model = Analysis.model();
  ASTContext &Ctx = Program.context();

  TrainingLoopRepeats Repeats(Program, MaxLoopDepth);
  auto Quoted = [&](const Expr *E, StringRef Fallback) {
    return quotedSource(E, Ctx, Fallback, /*MaxLength=*/48);
  };

  Analysis.replay([&](const Stmt &S, const TensorState &State) {
    const auto *Call = dyn_cast<CallExpr>(&S);
    if (!Call)
      return;

    // The tensor that is read back, when the sync is a tensor read.
    const Expr *Tensor = nullptr;
    bool IsPrint = false;
    bool IsSynchronize = false;
    SourceLocation Loc = Call->getBeginLoc();
    if (const auto *Member = dyn_cast<MemberExpr>(Call->getCallee()))
      Loc = Member->getMemberLoc();

    StringRef Method = tensorMethodName(*Call);
    if (Method == "item" || Method == "cpu") {
      Tensor = memberCallObject(*Call);
    } else if (Method == "to") {
      // Only a blocking copy to a known CPU destination.
      const Expr *NonBlocking = argumentForParameter(*Call, "non_blocking");
      if (NonBlocking && Model.evaluateBool(NonBlocking, State) != false)
        return;
      bool ToCPU = false;
      for (StringRef P : {"options", "device"})
        if (const Expr *Dest = argumentForParameter(*Call, P))
          ToCPU = ToCPU || Model.evaluateDeviceSpec(Dest, State).Value.isCPU();
      if (const Expr *Other = argumentForParameter(*Call, "other"))
        ToCPU = Model.evaluate(Other, State).Device.Value.isCPU();
      if (!ToCPU)
        return;
      Tensor = memberCallObject(*Call);
    } else if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Call)) {
      if (Op->getOperator() != OO_LessLess || Op->getNumArgs() != 2 ||
          !isTensorType(Op->getArg(1)->getType()))
        return;
      const FunctionDecl *FD = Op->getDirectCallee();
      if (!FD || FD->getNumParams() < 1)
        return;
      const CXXRecordDecl *Stream = FD->getParamDecl(0)
                                        ->getType()
                                        .getNonReferenceType()
                                        ->getAsCXXRecordDecl();
      if (!Stream || Stream->getQualifiedNameAsString() != "std::basic_ostream")
        return;
      Tensor = Op->getArg(1);
      IsPrint = true;
      Loc = Op->getOperatorLoc();
    } else if (isSynchronizeCall(*Call, Program.options())) {
      IsSynchronize = true;
    } else {
      return;
    }

    ValueFacts Facts;
    if (Tensor) {
      Facts = Model.evaluate(Tensor, State);
      if (!Facts.Device.Value.mayBeCUDA())
        return;
    }
    TrainingLoopRepeats::Loop Where = Repeats.at(S);
    if (!Where.Statement || !firstAt(Loc))
      return;

    std::string When;
    if (Tensor && Facts.Device.Value.isSymbolic())
      When = " where " + Facts.Device.Value.describe() + " is CUDA";
    if (IsPrint)
      diag(Loc, "printing %0 copies it to the host and synchronises with the "
                "GPU on every training step%1; the GPU idles while the host "
                "waits; print under a condition (e.g. every N steps) or "
                "accumulate on the device")
          << Quoted(Tensor, "a tensor") << When;
    else if (IsSynchronize)
      diag(Loc, "%0 blocks the host until the GPU is idle on every training "
                "step; the GPU idles while the host launches the next "
                "kernels; synchronise under a condition (e.g. every N steps) "
                "or not at all")
          << Quoted(Call, "synchronize()");
    else
      diag(Loc, "%0 synchronises the host with the GPU on every training "
                "step%1; the GPU idles while the host waits; sync under a "
                "condition (e.g. every N steps) or accumulate on the device")
          << Quoted(Call, ("'." + Method + "()'").str()) << When;

    std::string StepName;
    if (const FunctionDecl *FD = Where.StepCall->getDirectCallee())
      StepName = FD->getNameAsString() + "()";
    SourceLocation StepLoc = Where.StepCall->getBeginLoc();
    if (const auto *Member = dyn_cast<MemberExpr>(Where.StepCall->getCallee()))
      StepLoc = Member->getMemberLoc();
    diag(StepLoc, "inside this training loop, which calls '%0'",
         DiagnosticIDs::Note)
        << StepName;
    if (Tensor)
      noteFact(Facts.Device, Quoted(Tensor, "the tensor"),
               "%0 is on %1 from here", Facts.Device.Value.describe());
  });
}

} // namespace clang::tidy::torch
