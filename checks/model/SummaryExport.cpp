//===--- SummaryExport.cpp - torch-tidy -----------------------------------===//
//
// What one TU tells an audit about itself: the summaries of the externally
// visible functions its main file defines; at each call of an externally
// visible user function, whether the call runs only where CUDA is available
// and with autograd off (ExternalSummaries::finishEntries combines the calls
// of all TUs); and which facts of other TUs its checks asked for.
//
//===----------------------------------------------------------------------===//

#include "CudaAvailabilityGuard.h"
#include "ExternalSummaries.h"
#include "ProgramModel.h"
#include "model/GradMode.h"
#include "clang/Basic/SourceManager.h"

namespace clang::tidy::torch {

/// A function other TUs can call, whose USR is the same everywhere.
static bool isExported(const FunctionDecl &F) {
  return F.isExternallyVisible() && !F.isDependentContext() &&
         !F.isTemplateInstantiation() && !isLibraryFunction(F) &&
         !(isa<CXXMethodDecl>(F) &&
           cast<CXXMethodDecl>(F).getParent()->isLambda());
}

/// \p Set, sorted.
static llvm::json::Array sorted(const llvm::StringSet<> &Set) {
  std::vector<llvm::StringRef> Keys;
  for (const auto &K : Set)
    Keys.push_back(K.getKey());
  llvm::sort(Keys);
  llvm::json::Array Out;
  for (llvm::StringRef K : Keys)
    Out.push_back(K);
  return Out;
}

llvm::json::Object exportTranslationUnit(ProgramModel &Program) {
  // What the checks asked for, before the export's own questions below:
  // they shape no finding.
  const ExternalReads &Asked = Program.externalReads();
  llvm::json::Object Reads{{"summaries", sorted(Asked.Summaries)},
                           {"entries", sorted(Asked.Entries)}};
  ASTContext &Ctx = Program.context();
  const SourceManager &SM = Ctx.getSourceManager();
  const CallGraph &Graph = Program.callGraph();

  // The graph's map is unordered; sort by place for stable output.
  std::vector<const FunctionDecl *> Functions;
  for (const auto &Entry : Graph)
    if (const auto *FD = dyn_cast_or_null<FunctionDecl>(Entry.first))
      Functions.push_back(FD);
  llvm::sort(Functions, [](const FunctionDecl *A, const FunctionDecl *B) {
    return A->getLocation().getRawEncoding() < B->getLocation().getRawEncoding();
  });

  llvm::json::Object Summaries;
  llvm::json::Array AddressTaken;
  for (const FunctionDecl *FD : Functions) {
    const FunctionDecl *Definition = nullptr;
    if (!isExported(*FD))
      continue;
    if (Program.isAddressTaken(*FD))
      AddressTaken.push_back(usrOf(*FD));
    if (!FD->hasBody(Definition) || !Definition ||
        !SM.isInMainFile(SM.getExpansionLoc(Definition->getLocation())))
      continue;
    if (const FunctionSummary *S = Program.summary(*Definition)) {
      std::string USR = usrOf(*FD);
      if (!USR.empty())
        Summaries[USR] = serializeSummary(*Definition, *S, SM);
    }
  }

  CudaAvailabilityGuard Guard(Ctx, CudaGuardOptions(), &Program);
  GradModeOracle GradMode(Program, {});
  llvm::json::Array Calls;
  for (const FunctionDecl *Callee : Functions) {
    if (!isExported(*Callee))
      continue;
    std::string CalleeUSR = usrOf(*Callee);
    for (const CallSite &Site : Program.callSitesOf(*Callee)) {
      if (!Site.Caller)
        continue;
      const auto *Method = dyn_cast<CXXMethodDecl>(Site.Caller);
      bool InLambda = Method && Method->getParent()->isLambda();
      Calls.push_back(llvm::json::Object{
          {"callee", CalleeUSR},
          {"caller", InLambda ? "" : usrOf(*Site.Caller)},
          {"cudaGuarded",
           !InLambda && Guard.isGuardedCall(*Site.Call, *Site.Caller)},
          {"gradDisabled", GradMode.at(*Site.Call) == GradModeAt::Disabled}});
    }
  }
  return llvm::json::Object{{"version", SummaryFormatVersion},
                            {"functions", std::move(Summaries)},
                            {"calls", std::move(Calls)},
                            {"addressTaken", std::move(AddressTaken)},
                            {"reads", std::move(Reads)}};
}

} // namespace clang::tidy::torch
