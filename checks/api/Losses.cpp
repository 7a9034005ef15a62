//===--- Losses.cpp - torch-tidy ------------------------------------------===//

#include "Losses.h"
#include "TorchApi.h"
#include "clang/AST/DeclCXX.h"

namespace clang::tidy::torch {

/// What the reduction named in \p E is: `torch::kMean` (through its
/// conversion to the options' variant) or `at::Reduction::Mean`; nullopt
/// for a value the code computes.
static std::optional<bool> namesMean(const Expr *E) {
  for (unsigned Depth = 0; E && Depth < 4; ++Depth) {
    E = stripConversions(E);
    if (const auto *Ref = dyn_cast<DeclRefExpr>(E)) {
      if (const auto *Enumerator = dyn_cast<EnumConstantDecl>(Ref->getDecl()))
        return Enumerator->getName() == "Mean";
      const CXXRecordDecl *RD =
          Ref->getType().getNonReferenceType()->getAsCXXRecordDecl();
      if (RD && RD->getIdentifier() && RD->getName().starts_with("k"))
        return RD->getName() == "kMean";
      return std::nullopt;
    }
    const auto *Construct = dyn_cast<CXXConstructExpr>(E);
    if (!Construct || Construct->getNumArgs() != 1)
      return std::nullopt;
    E = Construct->getArg(0);
  }
  return std::nullopt;
}

/// Whether options built by \p E reduce to the mean: a builder chain
/// (`Options().ignore_index(0).reduction(torch::kSum)`), `{}`, or a default
/// argument. Nullopt for options held in a variable.
static std::optional<bool> optionsReduceToMean(const Expr *E) {
  for (unsigned Depth = 0; E && Depth < 16; ++Depth) {
    if (isa<CXXDefaultArgExpr>(E))
      return true;
    E = E->IgnoreImplicit()->IgnoreParens();
    if (const auto *Call = dyn_cast<CXXMemberCallExpr>(E)) {
      const CXXMethodDecl *MD = Call->getMethodDecl();
      if (MD && MD->getIdentifier() && MD->getName() == "reduction")
        return Call->getNumArgs() == 1 ? namesMean(Call->getArg(0))
                                       : std::nullopt;
      E = Call->getImplicitObjectArgument();
      continue;
    }
    if (const auto *Construct = dyn_cast<CXXConstructExpr>(E)) {
      if (Construct->getConstructor()->isCopyOrMoveConstructor() &&
          Construct->getNumArgs() == 1) {
        E = Construct->getArg(0);
        continue;
      }
      // A fresh options object: its own arguments are sizes, weights, ...
      return true;
    }
    if (const auto *List = dyn_cast<InitListExpr>(E))
      return List->getNumInits() == 0 ? std::optional<bool>(true)
                                      : std::nullopt;
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<bool> reducesToMean(const CallExpr &Call) {
  llvm::StringRef Method = tensorMethodName(Call);
  const FunctionDecl *FD = Call.getDirectCallee();
  bool FreeMean = FD && !Method.size() && FD->getIdentifier() &&
                  FD->getName() == "mean" && isTorchFunction(*FD);
  if (Method == "mean" || FreeMean) {
    // Over every element: no argument but a dtype.
    for (unsigned I = FreeMean ? 1 : 0; I < Call.getNumArgs(); ++I) {
      const Expr *Arg = Call.getArg(I);
      if (!isa<CXXDefaultArgExpr>(Arg) &&
          Arg->getType().getAsString().find("ScalarType") == std::string::npos)
        return std::nullopt;
    }
    return true;
  }
  if (!FD || !Method.empty() || !isLossFunction(*FD))
    return std::nullopt;
  if (const Expr *Reduction = argumentForParameter(Call, "reduction"))
    return namesMean(Reduction);
  if (const Expr *Options = argumentForParameter(Call, "options"))
    return optionsReduceToMean(Options);
  return true; // every LibTorch loss reduces to the mean by default
}

std::optional<bool> lossModuleReducesToMean(QualType T,
                                            const CXXConstructExpr *E) {
  const CXXRecordDecl *RD = T->getAsCXXRecordDecl();
  if (!RD || !RD->getIdentifier() || !RD->getName().ends_with("Loss") ||
      !isModuleHandleType(T) || !isTorchNamespaceDecl(*RD))
    return std::nullopt;
  if (!E)
    return true;
  unsigned Given = 0;
  const Expr *Options = nullptr;
  for (const Expr *Arg : E->arguments())
    if (!isa<CXXDefaultArgExpr>(Arg)) {
      ++Given;
      Options = Arg;
    }
  if (Given == 0)
    return true;
  return Given == 1 ? optionsReduceToMean(Options) : std::nullopt;
}

bool isGradientRescale(const CallExpr &Call) {
  const Expr *Target = nullptr;
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&Call)) {
    if ((Op->getOperator() == OO_SlashEqual ||
         Op->getOperator() == OO_StarEqual) &&
        Op->getNumArgs() == 2)
      Target = Op->getArg(0);
  } else {
    llvm::StringRef Method = tensorMethodName(Call);
    if (Method == "div_" || Method == "mul_")
      Target = memberCallObject(Call);
  }
  const auto *Grad =
      Target ? dyn_cast<CallExpr>(Target->IgnoreImplicit()->IgnoreParens())
             : nullptr;
  if (!Grad)
    return false;
  llvm::StringRef Of = tensorMethodName(*Grad);
  return Of == "grad" || Of == "mutable_grad";
}

} // namespace clang::tidy::torch
