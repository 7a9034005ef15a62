//===--- EmptyCacheInLoopCheck.cpp - torch-tidy ---------------------------===//
//
// What it watches for: `emptyCache()` that runs inside a loop. Outside any
// loop of its own function, it is lifted to the callers: one that calls the
// function (or lambda) in a loop runs it in that loop.
//
//===----------------------------------------------------------------------===//

#include "EmptyCacheInLoopCheck.h"
#include "api/TorchMatchers.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

namespace {

class EmptyCacheOutsideLoops : public Requirement {
public:
  llvm::StringRef name() const override { return "empty-cache-outside-loops"; }

  bool match(const Stmt &S, const FlowModel &M, const State &,
             RequirementMatch &Out) const override {
    const auto *Call = dyn_cast<CallExpr>(&S);
    const FunctionDecl *FD = Call ? Call->getDirectCallee() : nullptr;
    if (!FD || !FD->getIdentifier())
      return false;
    std::string Qualified = "::" + FD->getQualifiedNameAsString();
    bool Known = llvm::is_contained(emptyCacheFunctionNames(),
                                    llvm::StringRef(Qualified));
    if (!Known && !matchesNameList(*FD, M.options().ExtraEmptyCacheFunctions))
      return false;
    Out.What = "'emptyCache()'";
    return true;
  }

  Verdict judge(const RequirementMatch &, const SiteContext &C) const override {
    return C.Loop.Loop.isValid() ? Verdict::Violated : Verdict::Callers;
  }
};

const EmptyCacheOutsideLoops Instance;
const RequirementRegistration Registered(Instance);

} // namespace

EmptyCacheInLoopCheck::EmptyCacheInLoopCheck(StringRef Name,
                                             ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      ExtraEmptyCacheFunctions(Options.get("ExtraEmptyCacheFunctions", "")) {
  Kind = &Instance;
}

void EmptyCacheInLoopCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraEmptyCacheFunctions", ExtraEmptyCacheFunctions);
}

void EmptyCacheInLoopCheck::report(const Violation &V, ProgramModel &Program) {
  SourceLocation Loc = V.FromCallee ? V.FromCallee->At
                                    : V.Site->getBeginLoc();
  if (V.FromCallee && V.FromCallee->AtStmt)
    Loc = V.FromCallee->AtStmt->getBeginLoc();
  if (!firstAt(Loc))
    return;
  diag(Loc, "'emptyCache()' inside a loop synchronises the device and returns "
            "cached blocks with cudaFree every iteration; the next iteration "
            "must cudaMalloc them again and the peak memory stays the same");
  diag(V.Context.Loop.Loop, "the loop that repeats the call",
       DiagnosticIDs::Note);
  if (!V.FromCallee)
    return;
  const auto *Method = dyn_cast_or_null<CXXMethodDecl>(V.Callee);
  if (Method && Method->getParent()->isLambda())
    diag(Method->getParent()->getLocation(), "called through this lambda",
         DiagnosticIDs::Note);
  else
    diag(V.Site->getBeginLoc(), "called through %0 here", DiagnosticIDs::Note)
        << (V.Callee ? Program.calleeName(*V.Callee) : "a function");
}

} // namespace clang::tidy::torch
