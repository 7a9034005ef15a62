//===--- TrainingLoop.cpp - torch-tidy ------------------------------------===//

#include "TrainingLoop.h"
#include "TorchMatchers.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace clang::tidy::torch {

static bool matchesListedName(const NamedDecl &D,
                              const std::vector<std::string> &Names) {
  if (Names.empty() || !D.getIdentifier())
    return false;
  std::string Qualified = D.getQualifiedNameAsString();
  for (llvm::StringRef N : Names) {
    N = N.trim();
    if (N.contains("::")) {
      N.consume_front("::");
      if (N == Qualified)
        return true;
    } else if (N == D.getName()) {
      return true;
    }
  }
  return false;
}

static bool isRecordNamed(const CXXRecordDecl *RD, llvm::StringRef Name) {
  return RD && RD->getQualifiedNameAsString() == Name;
}

static bool isOptimizerClass(const CXXRecordDecl *RD) {
  if (!RD || !RD->hasDefinition())
    return false;
  RD = RD->getDefinition();
  if (isRecordNamed(RD, "torch::optim::Optimizer"))
    return true;
  return !RD->forallBases([](const CXXRecordDecl *Base) {
    return !isRecordNamed(Base, "torch::optim::Optimizer");
  });
}

bool isBackwardCall(const CallExpr &Call, const TrainingLoopOptions &Opts) {
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD || !FD->getIdentifier())
    return false;
  if (const auto *MD = dyn_cast<CXXMethodDecl>(FD)) {
    if (FD->getName() == "backward" &&
        (isRecordNamed(MD->getParent(), "at::Tensor") ||
         isRecordNamed(MD->getParent(), "at::TensorBase")))
      return true;
  } else {
    std::string Q = FD->getQualifiedNameAsString();
    if (Q == "torch::autograd::backward" || Q == "torch::autograd::grad")
      return true;
  }
  return matchesListedName(*FD, Opts.ExtraBackwardFunctions);
}

bool isOptimizerStepCall(const CallExpr &Call,
                         const TrainingLoopOptions &Opts) {
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD || !FD->getIdentifier())
    return false;
  if (const auto *MD = dyn_cast<CXXMethodDecl>(FD))
    if (FD->getName() == "step" && isOptimizerClass(MD->getParent()))
      return true;
  return matchesListedName(*FD, Opts.ExtraStepFunctions);
}

/// Namespaces whose functions never run a user's backward pass.
static bool isLibraryFunction(const FunctionDecl &FD, const ASTContext &Ctx) {
  const DeclContext *DC = FD.getDeclContext();
  const NamespaceDecl *Outermost = nullptr;
  for (; DC; DC = DC->getParent())
    if (const auto *NS = dyn_cast<NamespaceDecl>(DC))
      Outermost = NS;
  if (Outermost && Outermost->getIdentifier()) {
    llvm::StringRef N = Outermost->getName();
    if (N == "std" || N == "torch" || N == "at" || N == "c10" ||
        N == "caffe2" || N == "__gnu_cxx")
      return true;
  }
  // C library and other global functions of system headers.
  return !Outermost &&
         Ctx.getSourceManager().isInSystemHeader(FD.getLocation());
}

static bool carriesTensor(QualType T, unsigned Depth) {
  if (T.isNull() || Depth > 3)
    return false;
  T = T.getNonReferenceType();
  if (T->isPointerType())
    T = T->getPointeeType();
  T = T.getCanonicalType();
  if (isTensorType(T))
    return true;
  const auto *RD = T->getAsCXXRecordDecl();
  if (!RD)
    return false;
  if (const auto *Spec = dyn_cast<ClassTemplateSpecializationDecl>(RD))
    for (const TemplateArgument &A : Spec->getTemplateArgs().asArray())
      if (A.getKind() == TemplateArgument::Type &&
          carriesTensor(A.getAsType(), Depth + 1))
        return true;
  if (!RD->hasDefinition() || RD->isLambda())
    return false;
  std::string Q = RD->getQualifiedNameAsString();
  if (llvm::StringRef(Q).starts_with("std::"))
    return false;
  if (llvm::StringRef(Q).starts_with("torch::data::Example"))
    return true;
  for (const FieldDecl *F : RD->getDefinition()->fields())
    if (carriesTensor(F->getType(), Depth + 1))
      return true;
  return false;
}

bool carriesTensor(QualType T) { return carriesTensor(T, 0); }

namespace {

/// Walks a statement, the lambdas it contains and the functions of the TU it
/// calls, looking for backward passes (and, on request, optimizer steps and
/// opaque calls).
class BackwardFinder : public RecursiveASTVisitor<BackwardFinder> {
public:
  BackwardFinder(ASTContext &Ctx, const TrainingLoopOptions &Opts,
                 bool IncludeStep, bool IncludeOpaque)
      : Ctx(Ctx), Opts(Opts), IncludeStep(IncludeStep),
        IncludeOpaque(IncludeOpaque) {}

  bool shouldVisitLambdaBody() const { return true; }

  /// Scans \p S with \p Depth levels of callees left.
  void scan(const Stmt &S, unsigned Depth) {
    unsigned Saved = DepthLeft;
    DepthLeft = Depth;
    TraverseStmt(const_cast<Stmt *>(&S));
    DepthLeft = Saved;
  }

  bool VisitCallExpr(CallExpr *Call) {
    if (Found)
      return false;
    if (isBackwardCall(*Call, Opts) ||
        (IncludeStep && isOptimizerStepCall(*Call, Opts))) {
      Found = Call;
      return false;
    }
    if (IncludeOpaque && isOpaqueCallWithTensors(*Call)) {
      Found = Call;
      return false;
    }
    const FunctionDecl *FD = Call->getDirectCallee();
    if (!FD || DepthLeft == 0)
      return true;
    const FunctionDecl *Def = nullptr;
    if (!FD->hasBody(Def) || !Def || !Visited.insert(Def).second ||
        Ctx.getSourceManager().isInSystemHeader(Def->getLocation()))
      return true;
    scan(*Def->getBody(), DepthLeft - 1);
    return !Found;
  }

  const CallExpr *Found = nullptr;

private:
  bool isOpaqueCallWithTensors(const CallExpr &Call) const {
    const FunctionDecl *FD = Call.getDirectCallee();
    bool Opaque = false;
    if (!FD) {
      // A function pointer, or a call whose target is not known.
      Opaque = true;
    } else if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&Call);
               Op && Op->getOperator() == OO_Call) {
      // std::function and other type-erased callables; lambdas and module
      // holders are seen through or known.
      const auto *MD = dyn_cast<CXXMethodDecl>(FD);
      const CXXRecordDecl *RD = MD ? MD->getParent() : nullptr;
      Opaque = RD && !RD->isLambda() &&
               RD->getQualifiedNameAsString() == "std::function";
      if (!Opaque && RD && !RD->isLambda() && !isLibraryFunction(*FD, Ctx))
        Opaque = !FD->hasBody() || MD->isVirtual();
    } else if (isLibraryFunction(*FD, Ctx)) {
      Opaque = false;
    } else if (FD->getIdentifier() && FD->getName() == "forward") {
      // A module's forward builds a graph; it does not run backward.
      Opaque = false;
    } else {
      const auto *MD = dyn_cast<CXXMethodDecl>(FD);
      Opaque = !FD->hasBody() || (MD && MD->isVirtual() &&
                                  !MD->getParent()->hasAttr<FinalAttr>());
    }
    if (!Opaque)
      return false;
    for (const Expr *Arg : Call.arguments())
      if (carriesTensor(Arg->getType(), 0))
        return true;
    if (const auto *Member = dyn_cast<CXXMemberCallExpr>(&Call))
      if (const Expr *Obj = Member->getImplicitObjectArgument())
        return carriesTensor(Obj->getType(), 0);
    return false;
  }

  ASTContext &Ctx;
  const TrainingLoopOptions &Opts;
  bool IncludeStep, IncludeOpaque;
  unsigned DepthLeft = 0;
  llvm::SmallPtrSet<const FunctionDecl *, 8> Visited;
};

} // namespace

static const CallExpr *find(const Stmt &S, ASTContext &Ctx,
                            const TrainingLoopOptions &Opts, bool IncludeStep,
                            bool IncludeOpaque) {
  BackwardFinder Finder(Ctx, Opts, IncludeStep, IncludeOpaque);
  Finder.scan(S, Opts.CalleeDepth);
  return Finder.Found;
}

const CallExpr *findBackwardCall(const Stmt &S, ASTContext &Ctx,
                                 const TrainingLoopOptions &Opts,
                                 bool IncludeStep) {
  return find(S, Ctx, Opts, IncludeStep, /*IncludeOpaque=*/false);
}

/// The parts of a loop that run once per iteration.
static llvm::SmallVector<const Stmt *, 3> repeatedParts(const Stmt &Loop) {
  llvm::SmallVector<const Stmt *, 3> Parts;
  if (const auto *For = dyn_cast<ForStmt>(&Loop))
    Parts = {For->getCond(), For->getInc(), For->getBody()};
  else if (const auto *RangeFor = dyn_cast<CXXForRangeStmt>(&Loop))
    Parts = {RangeFor->getLoopVarStmt(), RangeFor->getBody()};
  else if (const auto *While = dyn_cast<WhileStmt>(&Loop))
    Parts = {While->getCond(), While->getBody()};
  else if (const auto *Do = dyn_cast<DoStmt>(&Loop))
    Parts = {Do->getCond(), Do->getBody()};
  else
    Parts = {&Loop};
  llvm::erase(Parts, nullptr);
  return Parts;
}

static bool loopFinds(const Stmt &Loop, ASTContext &Ctx,
                      const TrainingLoopOptions &Opts, bool IncludeStep) {
  for (const Stmt *Part : repeatedParts(Loop))
    if (find(*Part, Ctx, Opts, IncludeStep, /*IncludeOpaque=*/false))
      return true;
  return false;
}

bool loopCallsBackward(const Stmt &Loop, ASTContext &Ctx,
                       const TrainingLoopOptions &Opts) {
  return loopFinds(Loop, Ctx, Opts, /*IncludeStep=*/false);
}

bool loopCallsBackwardOrStep(const Stmt &Loop, ASTContext &Ctx,
                             const TrainingLoopOptions &Opts) {
  return loopFinds(Loop, Ctx, Opts, /*IncludeStep=*/true);
}

bool mayCallBackward(const Stmt &S, ASTContext &Ctx,
                     const TrainingLoopOptions &Opts) {
  return find(S, Ctx, Opts, /*IncludeStep=*/true, /*IncludeOpaque=*/true);
}

static bool isInside(SourceLocation Loc, const Stmt &S,
                     const SourceManager &SM) {
  Loc = SM.getExpansionLoc(Loc);
  SourceLocation B = SM.getExpansionLoc(S.getBeginLoc());
  SourceLocation E = SM.getExpansionLoc(S.getEndLoc());
  return !SM.isBeforeInTranslationUnit(Loc, B) &&
         !SM.isBeforeInTranslationUnit(E, Loc);
}

StorageRoot classifyStorage(const Expr *E, const Stmt &Loop,
                            const ASTContext &Ctx) {
  for (unsigned Depth = 0; E && Depth < 16; ++Depth) {
    E = E->IgnoreParenImpCasts();
    if (const auto *ME = dyn_cast<MemberExpr>(E)) {
      const Expr *Base = ME->getBase()->IgnoreParenImpCasts();
      if (isa<CXXThisExpr>(Base))
        return {LoopStorage::Member, ME->getMemberDecl()};
      if (ME->isArrow())
        return {};
      E = Base;
      continue;
    }
    if (const auto *AS = dyn_cast<ArraySubscriptExpr>(E)) {
      E = AS->getBase();
      continue;
    }
    if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E)) {
      if (Op->getOperator() != OO_Subscript)
        return {};
      E = Op->getArg(0);
      continue;
    }
    const auto *Ref = dyn_cast<DeclRefExpr>(E);
    const auto *VD = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
    if (!VD)
      return {};
    if (!VD->hasLocalStorage() || VD->getType()->isReferenceType() ||
        VD->getType()->isPointerType())
      return {LoopStorage::NonLocal, VD};
    if (isInside(VD->getLocation(), Loop, Ctx.getSourceManager()))
      return {LoopStorage::PerIteration, VD};
    return {LoopStorage::LocalOutsideLoop, VD};
  }
  return {};
}

} // namespace clang::tidy::torch
