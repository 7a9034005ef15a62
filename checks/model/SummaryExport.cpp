//===--- SummaryExport.cpp - torch-tidy -----------------------------------===//
//
// What one TU tells an audit about itself: the summaries of the externally
// visible functions its main file defines; at each call of an externally
// visible user function, the facts the call hands over (its path facts,
// where it runs, the values of the callee's entry), in the caller's terms
// (ExternalSummaries::finishEntries resolves them over the whole program);
// and which facts of other TUs its checks asked for.
//
//===----------------------------------------------------------------------===//

#include "ExternalSummaries.h"
#include "FactsJson.h"
#include "FlowAnalysis.h"
#include "ProgramModel.h"
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

/// The entry values of \p Callee that a call hands over.
static llvm::SmallVector<const ValueDecl *, 8>
handedOver(const FunctionDecl &Callee) {
  llvm::SmallVector<const ValueDecl *, 8> Out(Callee.parameters().begin(),
                                              Callee.parameters().end());
  if (const auto *Method = dyn_cast<CXXMethodDecl>(&Callee);
      Method && !Method->isStatic() && !isa<CXXConstructorDecl>(Method))
    for (const FieldDecl *Field : Method->getParent()->fields())
      Out.push_back(Field);
  return Out;
}

llvm::json::Object exportTranslationUnit(ProgramModel &Program) {
  // What the checks asked for, before the export's own questions below:
  // they shape no finding.
  const ExternalReads &Asked = Program.externalReads();
  llvm::json::Object Reads{{"summaries", sorted(Asked.Summaries)},
                           {"entries", sorted(Asked.Entries)},
                           {"main", Asked.Main}};
  ASTContext &Ctx = Program.context();
  const SourceManager &SM = Ctx.getSourceManager();
  const CallGraph &Graph = Program.callGraph();

  // The graph's map is unordered; sort by place for stable output.
  std::vector<const FunctionDecl *> Functions;
  llvm::DenseSet<const FunctionDecl *> Seen;
  for (const auto &Entry : Graph)
    if (const auto *FD = dyn_cast_or_null<FunctionDecl>(Entry.first))
      if (Seen.insert(FD->getCanonicalDecl()).second)
        Functions.push_back(FD);
  for (const FunctionDecl *FD : Program.calledFunctions())
    if (Seen.insert(FD->getCanonicalDecl()).second)
      Functions.push_back(FD);
  llvm::sort(Functions, [](const FunctionDecl *A, const FunctionDecl *B) {
    return A->getLocation().getRawEncoding() < B->getLocation().getRawEncoding();
  });

  llvm::json::Object Summaries;
  llvm::json::Array AddressTaken;
  std::string Main;
  for (const FunctionDecl *FD : Functions) {
    const FunctionDecl *Definition = nullptr;
    if (FD->isMain() && FD->hasBody())
      Main = usrOf(*FD);
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
        Summaries[USR] = FactWriter(SM, Definition).summary(*S);
    }
  }

  llvm::json::Array Calls;
  for (const FunctionDecl *Callee : Functions) {
    if (!isExported(*Callee))
      continue;
    std::string CalleeUSR = usrOf(*Callee);
    FactWriter InCallee(SM, Callee);
    for (const CallSite &Site : Program.callSitesOf(*Callee)) {
      if (!Site.Caller || Site.Destroyed || Site.ThreadStart)
        continue;
      const auto *Method = dyn_cast<CXXMethodDecl>(Site.Caller);
      bool InLambda = Method && Method->getParent()->isLambda();
      // A lambda's facts are its own TU's: they go out resolved.
      const FlowAnalysis *A = InLambda ? Program.analysis(*Site.Caller)
                                       : Program.summaryAnalysis(*Site.Caller);
      if (!A)
        continue;
      std::optional<State> Before = A->stateBefore(*Site.Call);
      if (!Before)
        continue;
      const FlowModel &M = A->model();
      ResolvedCall Call = M.resolve(*Site.Call);
      FactWriter InCaller(SM, Site.Caller);
      llvm::json::Array Values;
      for (const ValueDecl *D : handedOver(*Callee)) {
        ValueFacts V = M.entryValueAt(*D, Call, *Before);
        if (V.isUnknown())
          continue;
        Values.push_back(llvm::json::Object{{"entry", InCallee.entry(D)},
                                            {"facts", InCaller.facts(V)}});
      }
      Calls.push_back(llvm::json::Object{
          {"callee", CalleeUSR},
          {"caller", InLambda ? "" : usrOf(*Site.Caller)},
          {"path", InCaller.pathFacts(Before->path())},
          {"loop", InCaller.loop(A->loopContext(*Site.Call))},
          {"values", std::move(Values)}});
    }
  }
  llvm::json::Object Out{{"version", SummaryFormatVersion},
                         {"file", Program.mainFileName()},
                         {"definesMain", !Main.empty()},
                         {"functions", std::move(Summaries)},
                         {"calls", std::move(Calls)},
                         {"addressTaken", std::move(AddressTaken)},
                         {"reads", std::move(Reads)}};
  if (!Main.empty())
    Out["main"] = Main;
  return Out;
}

} // namespace clang::tidy::torch
