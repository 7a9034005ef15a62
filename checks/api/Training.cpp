//===--- Training.cpp - torch-tidy ----------------------------------------===//

#include "Training.h"
#include "TorchApi.h"
#include "TorchMatchers.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/Lex/Lexer.h"

namespace clang::tidy::torch {

static bool isRecordNamed(const CXXRecordDecl *RD, llvm::StringRef Name) {
  return RD && RD->getQualifiedNameAsString() == Name;
}

const Expr *backwardSource(const Expr *E) {
  for (unsigned Depth = 0; E && Depth < 8; ++Depth) {
    E = stripConversions(E);
    if (const auto *Call = dyn_cast<CXXMemberCallExpr>(E)) {
      llvm::StringRef Name = tensorMethodName(*Call);
      if (Name != "mean" && Name != "sum" && Name != "squeeze")
        return E;
      E = Call->getImplicitObjectArgument();
      continue;
    }
    if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E)) {
      if (Op->getNumArgs() != 2 ||
          (Op->getOperator() != OO_Slash && Op->getOperator() != OO_Star))
        return E;
      bool LeftTensor = isTensorType(Op->getArg(0)->getType());
      bool RightTensor = isTensorType(Op->getArg(1)->getType());
      if (LeftTensor == RightTensor)
        return E;
      E = LeftTensor ? Op->getArg(0) : Op->getArg(1);
      continue;
    }
    return E;
  }
  return E;
}

bool isOptimizerClass(const CXXRecordDecl *RD) {
  if (!RD || !RD->hasDefinition())
    return false;
  RD = RD->getDefinition();
  if (isRecordNamed(RD, "torch::optim::Optimizer"))
    return true;
  return !RD->forallBases([](const CXXRecordDecl *Base) {
    return !isRecordNamed(Base, "torch::optim::Optimizer");
  });
}

bool isBackwardCall(const CallExpr &Call, const TorchApiOptions &Opts) {
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD || !FD->getIdentifier())
    return false;
  if (isa<CXXMethodDecl>(FD)) {
    if (tensorMethodName(Call) == "backward")
      return true;
  } else if (FD->getQualifiedNameAsString() == "torch::autograd::backward") {
    return true;
  }
  return matchesNameList(*FD, Opts.ExtraBackwardFunctions);
}

bool isGradientCall(const CallExpr &Call) {
  const FunctionDecl *FD = Call.getDirectCallee();
  return FD && FD->getIdentifier() && FD->getName() == "grad" &&
         FD->getQualifiedNameAsString() == "torch::autograd::grad";
}

bool isOptimizerStepCall(const CallExpr &Call, const TorchApiOptions &Opts) {
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD || !FD->getIdentifier())
    return false;
  if (const auto *MD = dyn_cast<CXXMethodDecl>(FD))
    if (FD->getName() == "step" && isOptimizerClass(MD->getParent()))
      return true;
  return matchesNameList(*FD, Opts.ExtraStepFunctions);
}

bool isZeroGradCall(const CallExpr &Call) {
  const auto *MC = dyn_cast<CXXMemberCallExpr>(&Call);
  const CXXMethodDecl *MD = MC ? MC->getMethodDecl() : nullptr;
  if (!MD || !MD->getIdentifier() || MD->getName() != "zero_grad")
    return false;
  return isOptimizerClass(MD->getParent()) ||
         isModuleHandleType(MD->getThisType()->getPointeeType());
}

bool isGradientReset(const CallExpr &Call, const TorchApiOptions &Opts) {
  if (isZeroGradCall(Call))
    return true;
  // `p.grad().zero_()`, `p.mutable_grad().reset()`.
  llvm::StringRef Method = tensorMethodName(Call);
  if (Method == "zero_" || Method == "reset" || Method == "detach_")
    if (const auto *Inner = dyn_cast_or_null<CallExpr>(
            memberCallObject(Call) ? memberCallObject(Call)->IgnoreImplicit()
                                   : nullptr)) {
      llvm::StringRef Of = tensorMethodName(*Inner);
      if (Of == "grad" || Of == "mutable_grad")
        return true;
    }
  // `p.mutable_grad() = torch::Tensor();`: the gradient replaced (set to
  // none, as zero_grad(true) does).
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&Call);
      Op && Op->getOperator() == OO_Equal && Op->getNumArgs() == 2)
    if (const auto *Target =
            dyn_cast<CallExpr>(Op->getArg(0)->IgnoreImplicit())) {
      llvm::StringRef Of = tensorMethodName(*Target);
      if (Of == "grad" || Of == "mutable_grad")
        return true;
    }
  const FunctionDecl *FD = Call.getDirectCallee();
  return FD && matchesNameList(*FD, Opts.ZeroGradFunctions);
}

static std::optional<bool> constantBool(const Expr *E, const ASTContext &Ctx) {
  bool Value = false;
  if (!E || E->isValueDependent() || !E->EvaluateAsBooleanCondition(Value, Ctx))
    return std::nullopt;
  return Value;
}

/// What an object of \p RD built by \p Init does to grad mode while it
/// lives; with \p Members, also through a guard it holds as a member (an
/// evaluator's `torch::NoGradGuard no_grad_`).
static GradGuardEffect guardEffect(const CXXRecordDecl &RD, const Expr *Init,
                                   const ASTContext &Ctx,
                                   const TorchApiOptions &Opts, bool Members) {
  if (matchesNameList(RD, Opts.GuardTypes))
    return GradGuardEffect::Disables;
  std::string N = RD.getQualifiedNameAsString();
  bool NoGrad = N == "c10::NoGradGuard" || N == "at::NoGradGuard";
  bool Inference = N == "c10::InferenceMode";
  bool AutoGrad = N == "c10::AutoGradMode" || N == "at::AutoGradMode";
  if (NoGrad)
    return GradGuardEffect::Disables;
  if (!Inference && !AutoGrad) {
    if (!Members || !RD.hasDefinition() || RD.isInStdNamespace())
      return GradGuardEffect::None;
    for (const FieldDecl *Field : RD.getDefinition()->fields())
      if (const CXXRecordDecl *Member = Field->getType()->getAsCXXRecordDecl())
        if (GradGuardEffect E = guardEffect(*Member,
                                            Field->getInClassInitializer(),
                                            Ctx, Opts, /*Members=*/false);
            E != GradGuardEffect::None)
          return E;
    return GradGuardEffect::None;
  }
  Init = Init ? Init->IgnoreImplicit() : nullptr;
  if (const auto *Default = dyn_cast_or_null<CXXDefaultInitExpr>(Init))
    Init = Default->getExpr()->IgnoreImplicit();
  const auto *Construct = dyn_cast_or_null<CXXConstructExpr>(Init);
  if (!Construct)
    return GradGuardEffect::Unknown;
  const Expr *Arg = Construct->getNumArgs() > 0 &&
                            !isa<CXXDefaultArgExpr>(Construct->getArg(0))
                        ? Construct->getArg(0)
                        : nullptr;
  std::optional<bool> Value = constantBool(Arg, Ctx);
  if (Inference) {
    if (!Arg || Value == true)
      return GradGuardEffect::Disables;
    // InferenceMode(false) leaves grad mode as it was.
    return Value == false ? GradGuardEffect::None : GradGuardEffect::Unknown;
  }
  if (!Value)
    return GradGuardEffect::Unknown;
  return *Value ? GradGuardEffect::Enables : GradGuardEffect::Disables;
}

GradGuardEffect gradGuardEffect(const VarDecl &VD, const ASTContext &Ctx,
                                const TorchApiOptions &Opts) {
  if (VD.getType()->isReferenceType() || VD.getType()->isPointerType())
    return GradGuardEffect::None;
  const CXXRecordDecl *RD = VD.getType()->getAsCXXRecordDecl();
  if (!RD)
    return GradGuardEffect::None;
  return guardEffect(*RD, VD.getInit(), Ctx, Opts, /*Members=*/true);
}

const Expr *setGradEnabledArgument(const CallExpr &Call) {
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD || Call.getNumArgs() != 1 ||
      FD->getQualifiedNameAsString() != "c10::GradMode::set_enabled")
    return nullptr;
  return Call.getArg(0);
}

std::string accumulationCount(const Stmt &Step, ASTContext &Ctx) {
  DynTypedNodeList Parents = Ctx.getParents(Step);
  for (unsigned Depth = 0; Depth < 6 && !Parents.empty(); ++Depth) {
    if (const auto *If = Parents[0].get<IfStmt>()) {
      const auto *Cmp =
          dyn_cast<BinaryOperator>(If->getCond()->IgnoreParenImpCasts());
      const auto *Mod =
          Cmp ? dyn_cast<BinaryOperator>(Cmp->getLHS()->IgnoreParenImpCasts())
              : nullptr;
      if (!Mod || Mod->getOpcode() != BO_Rem)
        return "";
      const Expr *N = Mod->getRHS()->IgnoreParenImpCasts();
      if (!isa<IntegerLiteral>(N) && !isa<DeclRefExpr>(N))
        return "";
      return Lexer::getSourceText(
                 CharSourceRange::getTokenRange(N->getSourceRange()),
                 Ctx.getSourceManager(), Ctx.getLangOpts())
          .str();
    }
    Parents = Ctx.getParents(Parents[0]);
  }
  return "";
}

} // namespace clang::tidy::torch
