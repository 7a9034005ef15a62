//===--- ObligedCallees.cpp - torch-tidy ----------------------------------===//
//
// The functions a call runs whose obligations apply at it: its callee, the
// overrides a virtual call may run, the functions a callable may hold, and
// the lambdas a library function runs.
//
//===----------------------------------------------------------------------===//

#include "ObligedCallees.h"
#include "ProgramModel.h"
#include "Summary.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

llvm::SmallVector<ObligedCallee, 1>
obligedCallees(const Stmt &S, const FlowModel &M, const State &St) {
  ProgramModel &P = M.program();
  llvm::SmallVector<ObligedCallee, 1> Out;
  const auto *E = dyn_cast<Expr>(&S);
  if (!E || !isa<CallExpr, CXXConstructExpr>(E))
    return Out;
  if (const auto *Call = dyn_cast<CallExpr>(E)) {
    if (P.callsClassUnderConstruction(*Call))
      return Out;
    if (const FunctionDecl *Target = M.callableTarget(*Call, St)) {
      if (const FunctionSummary *Summary = P.summary(*Target))
        Out.push_back({nullptr, Summary});
      return Out;
    }
    if (const Expr *Holder = callableHolder(*Call)) {
      const auto *PtrMem =
          dyn_cast<BinaryOperator>(Call->getCallee()->IgnoreParenImpCasts());
      bool OnObject = PtrMem && PtrMem->isPtrMemOp();
      bool SameEachRun = !rangeElementNamed(*Holder);
      for (const FunctionDecl *Target : M.possibleCallableTargets(*Call, St))
        if (const FunctionSummary *Summary = P.summary(*Target))
          Out.push_back({Target, Summary, false, OnObject, SameEachRun});
      return Out;
    }
    // A virtual call of uncertain target: each override the TU defines in
    // a class of the object's may run, and owes its obligations here.
    for (const auto &[Override, Summary] : P.dispatchedSummaries(*Call))
      Out.push_back({Override, Summary, false, true, true});
    if (!Out.empty())
      return Out;
    if (const FunctionDecl *FD = Call->getDirectCallee();
        FD && isLibraryFunction(*FD)) {
      if (storesCallableArgument(*FD))
        return Out;
      for (const Expr *Arg : Call->arguments())
        if (const auto *Lambda =
                dyn_cast<LambdaExpr>(stripConversions(Arg)->IgnoreImplicit())) {
          // A generic lambda (std::visit's): each instantiation it gets.
          const CXXMethodDecl *Op = Lambda->getCallOperator();
          llvm::SmallVector<const FunctionDecl *, 2> Bodies{Op};
          if (const FunctionTemplateDecl *T = Op->getDescribedFunctionTemplate())
            Bodies.assign(T->specializations().begin(),
                          T->specializations().end());
          for (const FunctionDecl *Body : Bodies)
            if (const FunctionSummary *Summary = P.summary(*Body))
              Out.push_back({Body, Summary, true});
        }
      return Out;
    }
  }
  if (const FunctionSummary *Summary = P.summaryForCall(*E))
    Out.push_back({nullptr, Summary});
  return Out;
}

} // namespace clang::tidy::torch
