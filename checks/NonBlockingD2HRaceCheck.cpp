//===--- NonBlockingD2HRaceCheck.cpp - torch-tidy -------------------------===//

#include "NonBlockingD2HRaceCheck.h"
#include "api/TorchMatchers.h"

namespace clang::tidy::torch {

NonBlockingD2HRaceCheck::NonBlockingD2HRaceCheck(StringRef Name,
                                                 ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawExtraSyncFunctions(Options.get("ExtraSyncFunctions", "")) {
  ApiOptions.ExtraSyncFunctions = parseNameList(RawExtraSyncFunctions);
}

void NonBlockingD2HRaceCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraSyncFunctions", RawExtraSyncFunctions);
}

void NonBlockingD2HRaceCheck::checkBody(const FunctionDecl &,
                                        const TensorFlowAnalysis &Analysis,
                                        ProgramModel &Program) {
  const TensorModel &Model = Analysis.model();
  const ASTContext &Ctx = Program.context();
  Analysis.replay([&](const Stmt &S, const TensorState &State) {
    llvm::SmallVector<const Expr *, 2> Reads;
    TensorModel::hostReadOperands(S, Reads);
    for (const Expr *Read : Reads) {
      const ValueFacts *F = State.lookup(Model.keyOf(Read));
      if (!F || !F->PendingDeviceToHostCopy)
        continue;
      if (!firstAt(Read->getBeginLoc()))
        return;
      diag(Read->getBeginLoc(),
           "%0 is read on the host before the non-blocking device-to-host "
           "copy that produced it has completed; synchronise first (e.g. "
           "torch::cuda::synchronize() or stream.synchronize())")
          << quotedSource(Read, Ctx, "the tensor");
      diag(F->PendingDeviceToHostCopy->getExprLoc(),
           "non-blocking copy to the host starts here", DiagnosticIDs::Note);
      return; // One warning per read.
    }
  });
}

} // namespace clang::tidy::torch
