//===--- NonBlockingD2HRaceCheck.cpp - torch-tidy -------------------------===//
//
// The requirement: a value that a non-blocking device-to-host copy produced
// is read on the host only after a synchronisation. The model carries the
// pending copy through values, returns, members and containers, and a
// synchronisation (or a blocking read of a CUDA tensor) completes it.
//
//===----------------------------------------------------------------------===//

#include "NonBlockingD2HRaceCheck.h"
#include "api/TorchMatchers.h"

namespace clang::tidy::torch {

namespace {

class PendingRead : public Requirement {
public:
  llvm::StringRef name() const override { return "pending-copy-read"; }

  bool match(const Stmt &S, const FlowModel &M, const State &St,
             RequirementMatch &Out) const override {
    llvm::SmallVector<const Expr *, 2> Reads;
    M.hostReadsAt(S, St, Reads);
    for (const Expr *Read : Reads) {
      ValueFacts F = M.evaluate(Read, St);
      if (F.PendingCopy.isInvalid())
        continue;
      Out.Operands.push_back(
          {F, quotedSource(Read, M.context(), "the tensor"), Read});
      return true;
    }
    return false;
  }

  Verdict judge(const RequirementMatch &M, const SiteContext &) const override {
    const ValueFacts &Read = M.Operands[0].Facts;
    if (Read.PendingCopy.isInvalid())
      return Verdict::Holds;
    // Pending if the callers pass a CUDA tensor: theirs to say.
    return Read.PendingIf ? Verdict::Callers : Verdict::Violated;
  }
};

const PendingRead Instance;
const RequirementRegistration Registered(Instance);

} // namespace

NonBlockingD2HRaceCheck::NonBlockingD2HRaceCheck(StringRef Name,
                                                 ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawExtraSyncFunctions(Options.get("ExtraSyncFunctions", "")) {
  Kind = &Instance;
}

void NonBlockingD2HRaceCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraSyncFunctions", RawExtraSyncFunctions);
}

void NonBlockingD2HRaceCheck::report(const Violation &V, ProgramModel &Program) {
  const Operand &Read = V.Match.Operands[0];
  SourceLocation Loc =
      Read.Source ? Read.Source->getBeginLoc() : locationOf(V, false);
  if (!CopiesReported.insert({Read.Facts.PendingCopy, &V.Analysis->model().owner()})
           .second ||
      !firstAt(Loc))
    return;
  std::string Name = nameOf(Read, Program.context(), "the tensor");
  diag(Loc, "%0 is read on the host before the non-blocking device-to-host "
            "copy that produced it has completed; synchronise first (e.g. "
            "torch::cuda::synchronize() or stream.synchronize())")
      << Name;
  notePath(Read.Facts.PendingVia, Name);
  diag(Read.Facts.PendingCopy, "non-blocking copy to the host starts here",
       DiagnosticIDs::Note);
}

} // namespace clang::tidy::torch
