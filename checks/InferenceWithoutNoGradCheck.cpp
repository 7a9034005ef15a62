//===--- InferenceWithoutNoGradCheck.cpp - torch-tidy ---------------------===//

#include "InferenceWithoutNoGradCheck.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "model/TrainingLoop.h"
#include "model/GradMode.h"
#include "api/TorchMatchers.h"
#include "model/UserCodeParents.h"
#include "clang/AST/RecursiveASTVisitor.h"

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

InferenceWithoutNoGradCheck::InferenceWithoutNoGradCheck(
    StringRef Name, ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawBackwardFunctions(Options.get("BackwardFunctions", "")),
      RawGuardTypes(Options.get("GuardTypes", "")) {
  ApiOptions.ExtraBackwardFunctions = parseNameList(RawBackwardFunctions);
  GuardTypes = parseNameList(RawGuardTypes);
}

InferenceWithoutNoGradCheck::~InferenceWithoutNoGradCheck() = default;

void InferenceWithoutNoGradCheck::storeOptions(
    ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "BackwardFunctions", RawBackwardFunctions);
  Options.store(Opts, "GuardTypes", RawGuardTypes);
}

void InferenceWithoutNoGradCheck::onStartOfTranslationUnit() {
  ModelCheck::onStartOfTranslationUnit();
  Oracle.reset();
  OracleProgram = nullptr;
  ReportedLoops.clear();
}

namespace {

/// How far tensors computed in a loop reach beyond one iteration.
enum class Escape { None, Function, OutOfFunction };

/// Finds stores of tensors (or containers of them) into storage that
/// outlives one iteration of \p Scope, and tensor-returning `return`s.
class EscapeFinder : public RecursiveASTVisitor<EscapeFinder> {
public:
  EscapeFinder(const Stmt &Scope, const ASTContext &Ctx)
      : Scope(Scope), Ctx(Ctx) {}

  bool shouldVisitLambdaBody() const { return true; }

  bool TraverseLambdaExpr(LambdaExpr *L) {
    // A `return` in a lambda returns to the lambda's caller, not out of the
    // function.
    ++LambdaDepth;
    bool R = RecursiveASTVisitor::TraverseLambdaExpr(L);
    --LambdaDepth;
    return R;
  }

  bool VisitReturnStmt(ReturnStmt *RS) {
    if (LambdaDepth == 0 && RS->getRetValue() &&
        carriesTensor(RS->getRetValue()->getType()))
      note(Escape::OutOfFunction);
    return true;
  }

  bool VisitBinaryOperator(BinaryOperator *BO) {
    if (BO->isAssignmentOp() && carriesTensor(BO->getLHS()->getType()))
      store(BO->getLHS());
    return true;
  }

  bool VisitCallExpr(CallExpr *Call) {
    // Assignments and in-place operators on tensors, push_back, insert,
    // add_, ...: an object that outlives the iteration and receives a
    // tensor. Also a function that takes such an object by non-const
    // reference or pointer.
    const FunctionDecl *FD = Call->getDirectCallee();
    const CXXMethodDecl *MD = dyn_cast_or_null<CXXMethodDecl>(FD);
    const Expr *Obj = nullptr;
    unsigned Offset = 0;
    if (const auto *Member = dyn_cast<CXXMemberCallExpr>(Call)) {
      Obj = Member->getImplicitObjectArgument();
    } else if (isa<CXXOperatorCallExpr>(Call) && MD && Call->getNumArgs()) {
      Obj = Call->getArg(0);
      Offset = 1;
    }
    bool TensorArgument = false;
    for (unsigned I = Offset; I < Call->getNumArgs(); ++I)
      TensorArgument |= carriesTensor(Call->getArg(I)->getType());
    if (!TensorArgument)
      return true;
    if (MD && Obj && carriesTensor(Obj->getType()) &&
        mutates(*MD, isTensorType(Obj->getType())))
      store(Obj);
    if (!FD)
      return true;
    for (unsigned I = Offset; I < Call->getNumArgs(); ++I) {
      unsigned P = I - Offset;
      if (P >= FD->getNumParams())
        break;
      QualType PT = FD->getParamDecl(P)->getType();
      bool Mutable = (PT->isReferenceType() || PT->isPointerType()) &&
                     !PT->getPointeeType().isConstQualified() &&
                     !PT->isRValueReferenceType();
      if (!Mutable)
        continue;
      const Expr *Arg = Call->getArg(I)->IgnoreParenImpCasts();
      if (const auto *UO = dyn_cast<UnaryOperator>(Arg);
          UO && UO->getOpcode() == UO_AddrOf)
        Arg = UO->getSubExpr();
      if (carriesTensor(Arg->getType()))
        store(Arg);
    }
    return true;
  }

  Escape Result = Escape::None;

private:
  /// LibTorch declares in-place tensor methods const: for a tensor, the
  /// assignment operators and the `*_` methods mutate.
  static bool mutates(const CXXMethodDecl &MD, bool OnTensor) {
    if (!OnTensor)
      return !MD.isConst();
    if (MD.isOverloadedOperator())
      return isAssignmentOperator(MD.getOverloadedOperator());
    return MD.getIdentifier() && MD.getName().ends_with("_");
  }
  static bool isAssignmentOperator(OverloadedOperatorKind K) {
    switch (K) {
    case OO_Equal:
    case OO_PlusEqual:
    case OO_MinusEqual:
    case OO_StarEqual:
    case OO_SlashEqual:
    case OO_PercentEqual:
    case OO_AmpEqual:
    case OO_PipeEqual:
    case OO_CaretEqual:
    case OO_LessLessEqual:
    case OO_GreaterGreaterEqual:
      return true;
    default:
      return false;
    }
  }
  void store(const Expr *Target) {
    StorageRoot Root = classifyStorage(Target, Scope, Ctx);
    if (Root.Kind == LoopStorage::PerIteration)
      return;
    note(Root.Kind == LoopStorage::LocalOutsideLoop ? Escape::Function
                                                    : Escape::OutOfFunction);
  }
  void note(Escape E) {
    if (static_cast<int>(E) > static_cast<int>(Result))
      Result = E;
  }

  const Stmt &Scope;
  const ASTContext &Ctx;
  unsigned LambdaDepth = 0;
};

} // namespace

static Escape findEscape(const Stmt &Scope, const ASTContext &Ctx) {
  EscapeFinder Finder(Scope, Ctx);
  Finder.TraverseStmt(const_cast<Stmt *>(&Scope));
  return Finder.Result;
}

void InferenceWithoutNoGradCheck::checkBody(const FunctionDecl &,
                                            const TensorFlowAnalysis &Analysis,
                                            ProgramModel &Program) {
  Analysis.replay([&](const Stmt &S, const TensorState &) {
    if (const auto *Call = dyn_cast<CallExpr>(&S))
      checkModuleCall(*Call, Program);
  });
}

void InferenceWithoutNoGradCheck::checkModuleCall(const CallExpr &Call,
                                                  ProgramModel &Program) {
  ASTContext &Ctx = Program.context();
  ModuleCall MC;
  if (Call.isTypeDependent() || !matchModuleCall(Call, MC))
    return;
  if (Call.getBeginLoc().isMacroID())
    return;
  EnclosingLoop Enclosing = findEnclosingLoop(Call, Ctx);
  if (!Enclosing.Loop || ReportedLoops.contains(Enclosing.Loop))
    return;
  const Stmt &Loop = *Enclosing.Loop;

  // 1. A backward pass or optimizer step in the loop, or a call that may run
  //    one: a training loop.
  if (mayCallBackward(Loop, Program))
    return;
  // 2. Tensors that leave the iteration may meet a backward later.
  Escape E = findEscape(Loop, Ctx);
  if (E == Escape::OutOfFunction)
    return;
  if (E == Escape::Function) {
    const Stmt *Body = enclosingFunctionBody(Loop, Ctx);
    if (!Body || mayCallBackward(*Body, Program) ||
        findEscape(*Body, Ctx) == Escape::OutOfFunction)
      return;
  }
  // 3. Autograd provably records here.
  if (!Oracle || OracleProgram != &Program) {
    Oracle = std::make_unique<GradModeOracle>(Program, GuardTypes);
    OracleProgram = &Program;
  }
  if (Oracle->at(Call) != GradModeAt::Enabled)
    return;

  ReportedLoops.insert(&Loop);
  if (!firstAt(Call.getBeginLoc()))
    return;
  diag(Call.getBeginLoc(),
       "module forward in a loop that never calls backward() runs without "
       "torch::NoGradGuard; autograd records the graph and keeps every "
       "activation for a backward that never comes (evaluation or "
       "validation loop?)");
  diag(Loop.getBeginLoc(),
       "this loop runs no backward() or optimizer step; declare "
       "'torch::NoGradGuard no_grad;' before it",
       DiagnosticIDs::Note);
}

} // namespace clang::tidy::torch
