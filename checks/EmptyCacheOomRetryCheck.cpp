//===--- EmptyCacheOomRetryCheck.cpp - torch-tidy -------------------------===//
//
// What it watches for: a call that runs the work of a `try` block again,
// after that block's out-of-memory handler emptied the cache, with none of
// the work's inputs written since the handler began. The engine records
// what each path writes from the handler on (model/OomRetry.cpp).
//
//===----------------------------------------------------------------------===//

#include "EmptyCacheOomRetryCheck.h"
#include "model/OomRetry.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

namespace {

enum : unsigned { TypedHandler = 1, RetryInTryBlock = 2 };

class NoSameSizeRetry : public Requirement {
public:
  llvm::StringRef name() const override { return "no-same-size-oom-retry"; }

  bool match(const Stmt &S, const FlowModel &M, const State &St,
             RequirementMatch &Out) const override {
    const auto *Call = dyn_cast<CallExpr>(&S);
    if (!Call || St.recoveries().empty())
      return false;
    const OomRecovery *R = M.recoveryRetriedBy(*Call, St);
    if (!R)
      return false;
    const SourceManager &SM = M.context().getSourceManager();
    SourceRange TryBlock = R->Try ? R->Try->getTryBlock()->getSourceRange()
                                  : SourceRange();
    Out.What = "'emptyCache()'";
    Out.Places = {R->EmptyCache, R->Handler};
    Out.Flags = (catchesOutOfMemoryError(*R->Handler) ? TypedHandler : 0) |
                (TryBlock.isValid() &&
                         SM.isPointWithin(Call->getBeginLoc(),
                                          TryBlock.getBegin(), TryBlock.getEnd())
                     ? RetryInTryBlock
                     : 0);
    return true;
  }

  Verdict judge(const RequirementMatch &, const SiteContext &) const override {
    return Verdict::Violated;
  }
};

const NoSameSizeRetry Instance;
const RequirementRegistration Registered(Instance);

} // namespace

EmptyCacheOomRetryCheck::EmptyCacheOomRetryCheck(StringRef Name,
                                                 ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      ExtraEmptyCacheFunctions(Options.get("ExtraEmptyCacheFunctions", "")),
      OutOfMemoryMessages(
          Options.get("OutOfMemoryMessages", "out of memory;OutOfMemory")) {
  Kind = &Instance;
}

void EmptyCacheOomRetryCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraEmptyCacheFunctions", ExtraEmptyCacheFunctions);
  Options.store(Opts, "OutOfMemoryMessages", OutOfMemoryMessages);
}

void EmptyCacheOomRetryCheck::report(const Violation &V, ProgramModel &) {
  if (V.Match.Places.size() != 2)
    return;
  const Stmt *EmptyCache = V.Match.Places[0];
  const auto *Handler = cast<CXXCatchStmt>(V.Match.Places[1]);
  if (!firstAt(EmptyCache->getBeginLoc()))
    return;
  diag(EmptyCache->getBeginLoc(),
       "'emptyCache()' before retrying after an out-of-memory error does not "
       "help: the caching allocator already frees its cached blocks before it "
       "raises OOM; retry with a smaller batch and gradient accumulation, or "
       "use activation checkpointing");
  diag(Handler->getCatchLoc(),
       V.Match.Flags & TypedHandler
           ? "the out-of-memory handler"
           : "the handler that tests for an out-of-memory error",
       DiagnosticIDs::Note);
  if (V.Match.Flags & RetryInTryBlock && V.Context.Loop.Loop.isValid())
    diag(V.Context.Loop.Loop,
         "this loop runs the try block again with unchanged inputs",
         DiagnosticIDs::Note);
  else
    diag(V.Site->getBeginLoc(),
         "the same call is retried here with unchanged arguments",
         DiagnosticIDs::Note);
}

} // namespace clang::tidy::torch
