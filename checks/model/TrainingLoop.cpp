//===--- TrainingLoop.cpp - torch-tidy ------------------------------------===//

#include "TrainingLoop.h"
#include "api/TorchMatchers.h"
#include "model/ProgramModel.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace clang::tidy::torch {

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

bool isBackwardCall(const CallExpr &Call, const TorchApiOptions &Opts) {
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
  return matchesNameList(*FD, Opts.ExtraBackwardFunctions);
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

bool callTrains(const CallExpr &Call, ProgramModel &Program,
                TrainingCall What) {
  const TorchApiOptions &Opts = Program.options();
  bool Backward = What != TrainingCall::Step;
  bool Step = What != TrainingCall::Backward;
  if ((Backward && isBackwardCall(Call, Opts)) ||
      (Step && isOptimizerStepCall(Call, Opts)))
    return true;
  const FunctionSummary *Summary = Program.summaryForCall(Call);
  return Summary && ((Backward && Summary->Backward.isValid()) ||
                     (Step && Summary->Step.isValid()));
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
    for (const TemplateArgument &A : Spec->getTemplateArgs().asArray()) {
      // std::tuple<Tensor, Tensor> holds its types in one pack.
      llvm::ArrayRef<TemplateArgument> Args =
          A.getKind() == TemplateArgument::Pack ? A.pack_elements()
                                                : llvm::ArrayRef(A);
      for (const TemplateArgument &Arg : Args)
        if (Arg.getKind() == TemplateArgument::Type &&
            carriesTensor(Arg.getAsType(), Depth + 1))
          return true;
    }
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

/// Walks a statement and the lambdas it contains for a call that trains
/// or, on request, an opaque call that receives tensors.
class TrainingCallFinder : public RecursiveASTVisitor<TrainingCallFinder> {
public:
  TrainingCallFinder(ProgramModel &Program, TrainingCall What,
                     bool IncludeOpaque)
      : Program(Program), What(What), IncludeOpaque(IncludeOpaque) {}

  bool shouldVisitLambdaBody() const { return true; }

  bool VisitCallExpr(CallExpr *Call) {
    if (callTrains(*Call, Program, What) ||
        (IncludeOpaque && isOpaqueCallWithTensors(*Call)))
      Found = Call;
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
               Op && Op->getOperator() == OO_Call &&
               isa<CXXMethodDecl>(FD) &&
               cast<CXXMethodDecl>(FD)->getParent()->getQualifiedNameAsString() ==
                   "std::function") {
      // A type-erased callable.
      Opaque = true;
    } else if (isLibraryFunction(*FD) ||
               (FD->getIdentifier() && FD->getName() == "forward")) {
      // LibTorch runs no backward of the user's; a module's forward builds
      // a graph, it does not run backward.
      Opaque = false;
    } else if (const FunctionSummary *Summary = Program.summaryForCall(Call)) {
      return Summary->MayRunOpaqueBackward;
    } else {
      Opaque = true;
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

  ProgramModel &Program;
  TrainingCall What;
  bool IncludeOpaque;
};

/// Synchronising calls outside the lambdas a statement defines: a lambda
/// defined in a helper runs only when something calls it.
class SyncFinder : public RecursiveASTVisitor<SyncFinder> {
public:
  explicit SyncFinder(ProgramModel &Program) : Program(Program) {}
  bool TraverseLambdaExpr(LambdaExpr *) { return true; }
  bool VisitCallExpr(CallExpr *Call) {
    if (isSynchronizeCall(*Call, Program.options()))
      Found = true;
    else if (const FunctionSummary *S = Program.summaryForCall(*Call))
      Found = S->MaySynchronize;
    return !Found;
  }
  bool Found = false;

private:
  ProgramModel &Program;
};

} // namespace

const CallExpr *findTrainingCall(const Stmt &S, ProgramModel &Program,
                                 TrainingCall What) {
  TrainingCallFinder Finder(Program, What, /*IncludeOpaque=*/false);
  Finder.TraverseStmt(const_cast<Stmt *>(&S));
  return Finder.Found;
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

static bool loopFinds(const Stmt &Loop, ProgramModel &Program,
                      TrainingCall What) {
  for (const Stmt *Part : repeatedParts(Loop))
    if (findTrainingCall(*Part, Program, What))
      return true;
  return false;
}

bool loopCallsBackward(const Stmt &Loop, ProgramModel &Program) {
  return loopFinds(Loop, Program, TrainingCall::Backward);
}

bool loopCallsBackwardOrStep(const Stmt &Loop, ProgramModel &Program) {
  return loopFinds(Loop, Program, TrainingCall::BackwardOrStep);
}

bool mayCallBackward(const Stmt &S, ProgramModel &Program) {
  TrainingCallFinder Finder(Program, TrainingCall::BackwardOrStep,
                            /*IncludeOpaque=*/true);
  Finder.TraverseStmt(const_cast<Stmt *>(&S));
  return Finder.Found;
}

bool maySynchronize(const Stmt &S, ProgramModel &Program) {
  SyncFinder Finder(Program);
  Finder.TraverseStmt(const_cast<Stmt *>(&S));
  return Finder.Found;
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
