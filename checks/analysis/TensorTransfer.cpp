//===--- TensorTransfer.cpp - torch-tidy ----------------------------------===//
//
// TensorModel::transfer: how statements change the tracked state.
//
//===----------------------------------------------------------------------===//

#include "TensorModel.h"
#include "utils/TorchMatchers.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/AST/StmtCXX.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace clang::tidy::torch {

namespace {

/// Collects the no-grad guard scopes and the variables whose value may
/// change where the analysis cannot see it.
class FunctionScanner : public RecursiveASTVisitor<FunctionScanner> {
public:
  FunctionScanner(const ASTContext &Ctx,
                  llvm::SmallVectorImpl<SourceRange> &GuardRanges,
                  llvm::DenseSet<const ValueDecl *> &Escaped)
      : Ctx(Ctx), GuardRanges(GuardRanges), Escaped(Escaped) {}

  bool VisitCompoundStmt(CompoundStmt *CS) {
    for (const Stmt *Child : CS->body()) {
      const auto *DS = dyn_cast<DeclStmt>(Child);
      if (!DS)
        continue;
      for (const Decl *D : DS->decls())
        if (const auto *VD = dyn_cast<VarDecl>(D))
          if (isNoGradGuardType(VD->getType()) && disablesGrad(*VD))
            GuardRanges.push_back({DS->getEndLoc(), CS->getRBracLoc()});
    }
    return true;
  }

  bool VisitUnaryOperator(UnaryOperator *UO) {
    if (UO->getOpcode() == UO_AddrOf)
      markEscaped(UO->getSubExpr());
    return true;
  }

  bool VisitLambdaExpr(LambdaExpr *L) {
    for (const LambdaCapture &C : L->captures())
      if (C.capturesVariable() && C.getCaptureKind() == LCK_ByRef)
        if (const auto *VD = dyn_cast<VarDecl>(C.getCapturedVar()))
          Escaped.insert(VD);
    return true;
  }

  bool VisitVarDecl(VarDecl *VD) {
    // A reference binds an alias: writes through it are invisible.
    if (VD->getType()->isReferenceType() && VD->getInit() &&
        !VD->getType().getNonReferenceType().isConstQualified())
      markEscaped(VD->getInit());
    return true;
  }

private:
  void markEscaped(const Expr *E) {
    if (const auto *Ref = dyn_cast<DeclRefExpr>(E->IgnoreParenImpCasts()))
      Escaped.insert(Ref->getDecl());
  }

  /// NoGradGuard and InferenceMode() always; AutoGradMode(false) and
  /// InferenceMode(false) only with a false argument.
  bool disablesGrad(const VarDecl &VD) const {
    std::string Name =
        VD.getType()->getAsCXXRecordDecl()->getQualifiedNameAsString();
    const auto *Construct =
        dyn_cast_or_null<CXXConstructExpr>(VD.getInit() ? VD.getInit()->IgnoreImplicit() : nullptr);
    const Expr *Arg = Construct && Construct->getNumArgs() > 0 &&
                              !isa<CXXDefaultArgExpr>(Construct->getArg(0))
                          ? Construct->getArg(0)
                          : nullptr;
    bool Value = true;
    bool Known = Arg && !Arg->isValueDependent() &&
                 Arg->EvaluateAsBooleanCondition(Value, Ctx);
    if (Name.find("NoGradGuard") != std::string::npos)
      return true;
    if (Name.find("InferenceMode") != std::string::npos)
      return !Arg || (Known && Value);
    return Known && !Value; // AutoGradMode(false)
  }

  const ASTContext &Ctx;
  llvm::SmallVectorImpl<SourceRange> &GuardRanges;
  llvm::DenseSet<const ValueDecl *> &Escaped;
};

} // namespace

NoGradRegions::NoGradRegions(const ASTContext &Ctx)
    : SM(Ctx.getSourceManager()) {}

bool NoGradRegions::contains(SourceLocation Loc) const {
  for (SourceRange R : Ranges)
    if (!SM.isBeforeInTranslationUnit(Loc, R.getBegin()) &&
        !SM.isBeforeInTranslationUnit(R.getEnd(), Loc))
      return true;
  return false;
}

TensorModel::TensorModel(const Decl &Function, const Stmt &Body,
                         ASTContext &Ctx, const TorchApiOptions &Opts)
    : Function(Function), Ctx(Ctx), Opts(Opts), NoGrad(Ctx) {
  llvm::SmallVector<SourceRange, 2> Ranges;
  FunctionScanner Scanner(Ctx, Ranges, Escaped);
  Scanner.TraverseStmt(const_cast<Stmt *>(&Body));
  NoGrad.addRanges(Ranges);
}

bool TensorModel::isTracked(const ValueDecl *D) const {
  return D && !Escaped.contains(D);
}

ValueKey TensorModel::keyOf(const Expr *E) const {
  if (!E)
    return {};
  E = E->IgnoreParenImpCasts();
  if (const auto *Ref = dyn_cast<DeclRefExpr>(E)) {
    const auto *VD = dyn_cast<VarDecl>(Ref->getDecl());
    if (VD && VD->hasLocalStorage() && !VD->getType()->isReferenceType() &&
        isTracked(VD))
      return {VD, nullptr};
    // A reference parameter (`Net &net`, `const torch::Tensor &x`) names one
    // object for the whole call; only this function's code changes it, and
    // opaque calls that take it by non-const reference forget it.
    if (VD && isa<ParmVarDecl>(VD) && isTracked(VD))
      return {VD, nullptr};
    return {};
  }
  if (const auto *Member = dyn_cast<MemberExpr>(E)) {
    const auto *Field = dyn_cast<FieldDecl>(Member->getMemberDecl());
    if (!Field)
      return {};
    const Expr *Base = Member->getBase()->IgnoreParenImpCasts();
    if (isa<CXXThisExpr>(Base))
      return {nullptr, Field};
    if (Member->isArrow())
      return {};
    if (ValueKey BaseKey = keyOf(Base))
      if (!BaseKey.Field)
        return {BaseKey.Base, Field};
    // A range-for variable bound by reference to a loader's batch.
    if (const auto *Ref = dyn_cast<DeclRefExpr>(Base))
      if (const auto *VD = dyn_cast<VarDecl>(Ref->getDecl()))
        if (VD->hasLocalStorage() && isDataExampleType(VD->getType()))
          return {VD, Field};
  }
  return {};
}

/// True when the module's class constructor moves it (`to(...)` inside
/// a user-defined constructor): a fresh instance is then not on the CPU.
static bool constructorMovesModule(QualType HandleType) {
  const CXXRecordDecl *RD =
      HandleType.getNonReferenceType()->getAsCXXRecordDecl();
  if (!RD)
    return true;
  // Look through ModuleHolder<Impl> and shared_ptr<Impl>.
  if (const auto *Spec = dyn_cast<ClassTemplateSpecializationDecl>(RD)) {
    if (Spec->getTemplateArgs().size() >= 1 &&
        Spec->getTemplateArgs()[0].getKind() == TemplateArgument::Type)
      RD = Spec->getTemplateArgs()[0].getAsType()->getAsCXXRecordDecl();
  } else {
    for (const CXXBaseSpecifier &Base : RD->bases())
      if (const auto *Spec = dyn_cast_or_null<ClassTemplateSpecializationDecl>(
              Base.getType()->getAsCXXRecordDecl()))
        if (Spec->getTemplateArgs().size() >= 1 &&
            Spec->getTemplateArgs()[0].getKind() == TemplateArgument::Type)
          RD = Spec->getTemplateArgs()[0].getAsType()->getAsCXXRecordDecl();
  }
  if (!RD)
    return true;
  for (const CXXConstructorDecl *Ctor : RD->ctors()) {
    const Stmt *Body = Ctor->getBody();
    if (!Body)
      continue;
    struct FindTo : RecursiveASTVisitor<FindTo> {
      bool Found = false;
      bool VisitCXXMemberCallExpr(CXXMemberCallExpr *C) {
        if (const auto *MD = C->getMethodDecl())
          Found |= MD->getIdentifier() && (MD->getName() == "to" ||
                                           MD->getName() == "cuda");
        return !Found;
      }
    } Finder;
    Finder.TraverseStmt(const_cast<Stmt *>(Body));
    if (Finder.Found)
      return true;
  }
  return false;
}

/// Whether \p Init builds a new module (not a copy of another handle).
static bool constructsNewModule(const Expr *Init) {
  if (!Init)
    return true; // `Net net;`
  const Expr *E = Init->IgnoreImplicit();
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(E)) {
    if (Construct->getConstructor()->isCopyOrMoveConstructor())
      return Construct->getNumArgs() == 1 &&
             constructsNewModule(Construct->getArg(0));
    // `Linear fc(4, 2)`, `Net net(...)`; nullptr holders hold nothing.
    return !(Construct->getNumArgs() == 1 &&
             Construct->getArg(0)->getType()->isNullPtrType());
  }
  if (const auto *Call = dyn_cast<CallExpr>(E))
    if (const FunctionDecl *FD = Call->getDirectCallee())
      return FD->getIdentifier() && FD->getName() == "make_shared";
  return false;
}

void TensorModel::assign(ValueKey Key, QualType Type, const Expr *Init,
                         SourceLocation Loc, TensorState &State) const {
  if (!Key)
    return;
  ValueFacts F;
  Type = Type.getNonReferenceType();
  if (isModuleHandleType(Type)) {
    // Parameters of a freshly constructed module start on the CPU.
    if (constructsNewModule(Init) && !constructorMovesModule(Type))
      F.Device = {DeviceValue::cpu(), Loc};
    State.set(Key, F);
    return;
  }
  if (Init)
    F = evaluate(Init, State);
  // A device variable that holds no constant is named after itself.
  if (isDeviceType(Type) && Init &&
      (!F.Device.Value.isKnown() || F.Device.Value.isSymbolic())) {
    const NamedDecl *Holder =
        Key.Field ? static_cast<const NamedDecl *>(Key.Field) : Key.Base;
    F.Device = {DeviceValue::symbolic(Holder), Loc};
  }
  if (Type->isBooleanType())
    F.BoolValue = evaluateBool(Init, State);
  F.PendingDeviceToHostCopy =
      isTensorType(Type) ? F.PendingDeviceToHostCopy : nullptr;
  State.set(Key, F);
}

const Expr *TensorModel::hostReadOperand(const Stmt &S) {
  if (const auto *Call = dyn_cast<CallExpr>(&S)) {
    llvm::StringRef Method = tensorMethodName(*Call);
    if (Method == "item" || Method == "data_ptr" || Method == "accessor" ||
        Method == "tolist")
      return memberCallObject(*Call);
    // The real headers (since 1.11) declare these two on at::TensorBase.
    if (const auto *MC = dyn_cast<CXXMemberCallExpr>(Call))
      if (const CXXMethodDecl *MD = MC->getMethodDecl())
        if (MD->getIdentifier() &&
            (MD->getName() == "data_ptr" || MD->getName() == "accessor") &&
            MD->getParent()->getQualifiedNameAsString() == "at::TensorBase")
          return memberCallObject(*Call);
  }
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&S)) {
    if (Op->getNumArgs() == 2 &&
        (Op->getOperator() == OO_LessLess || Op->isComparisonOp()))
      for (unsigned I = Op->getOperator() == OO_LessLess ? 1 : 0; I < 2; ++I)
        if (isTensorType(Op->getArg(I)->getType()))
          return Op->getArg(I)->IgnoreParenImpCasts();
  }
  return nullptr;
}

/// LibTorch and the standard library: what they do with a tensor argument
/// is either device work ordered on its stream or keeping the handle.
static bool isLibraryFunction(const FunctionDecl &FD) {
  if (FD.isInStdNamespace())
    return true;
  llvm::StringRef Top;
  for (const DeclContext *DC = FD.getDeclContext(); DC; DC = DC->getParent())
    if (const auto *NS = dyn_cast<NamespaceDecl>(DC))
      if (NS->getIdentifier())
        Top = NS->getName();
  return Top == "torch" || Top == "at" || Top == "c10" || Top == "caffe2" ||
         Top == "std";
}

void TensorModel::hostReadOperands(const Stmt &S,
                                   llvm::SmallVectorImpl<const Expr *> &Out) {
  if (const Expr *Operand = hostReadOperand(S)) {
    Out.push_back(Operand);
    return;
  }
  const auto *Call = dyn_cast<CallExpr>(&S);
  if (!Call || !tensorMethodName(*Call).empty())
    return;
  ModuleCall MC;
  if (matchModuleCall(*Call, MC))
    return;
  unsigned First = 0;
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Call)) {
    // Of the operators, only the call of a lambda or functor passes
    // arguments; streaming and comparisons are hostReadOperand's.
    if (Op->getOperator() != OO_Call)
      return;
    First = 1;
  }
  if (const FunctionDecl *FD = Call->getDirectCallee())
    if (isLibraryFunction(*FD))
      return;
  for (unsigned I = First; I < Call->getNumArgs(); ++I) {
    const Expr *Arg = stripConversions(Call->getArg(I));
    if (isTensorType(Arg->getType()) && isa<DeclRefExpr, MemberExpr>(Arg))
      Out.push_back(Arg);
  }
}

/// Whether the visible body of the user function \p Call calls (or of a
/// function it calls, a few levels down) makes a synchronising call.
static bool callsSynchronizingHelper(const CallExpr &Call,
                                     const TorchApiOptions &Opts) {
  struct Finder : RecursiveASTVisitor<Finder> {
    const TorchApiOptions &Opts;
    llvm::SmallPtrSet<const FunctionDecl *, 8> Seen;
    unsigned Depth = 0;
    bool Found = false;
    explicit Finder(const TorchApiOptions &Opts) : Opts(Opts) {}
    // A lambda defined in a helper runs only when something calls it.
    bool TraverseLambdaExpr(LambdaExpr *) { return true; }
    bool VisitCallExpr(CallExpr *C) {
      if (isSynchronizeCall(*C, Opts))
        Found = true;
      else if (const FunctionDecl *FD = C->getDirectCallee())
        enter(*FD);
      return !Found;
    }
    void enter(const FunctionDecl &FD) {
      const FunctionDecl *Def = nullptr;
      const Stmt *Body = FD.getBody(Def);
      if (!Body || Depth >= 3 || !Seen.insert(Def).second ||
          Def->getASTContext().getSourceManager().isInSystemHeader(
              Def->getLocation()))
        return;
      ++Depth;
      TraverseStmt(const_cast<Stmt *>(Body));
      --Depth;
    }
  } F(Opts);
  if (const FunctionDecl *FD = Call.getDirectCallee())
    F.enter(*FD);
  return F.Found;
}

bool TensorModel::isBlockingDeviceRead(const CallExpr &Call,
                                       const TensorState &S) const {
  llvm::StringRef Method = tensorMethodName(Call);
  if (Method != "item" && Method != "cpu" && Method != "to")
    return false;
  ValueFacts Object = evaluate(memberCallObject(Call), S);
  if (!Object.Device.Value.isCUDA())
    return false;
  if (Method == "item")
    return true;
  ValueFacts Result = evaluate(&Call, S);
  return Result.Device.Value.isCPU() && !Result.PendingDeviceToHostCopy;
}

void TensorModel::applyCallEffects(const CallExpr &Call,
                                   TensorState &State) const {
  if (isSynchronizeCall(Call, Opts) || isBlockingDeviceRead(Call, State) ||
      (State.hasPendingCopies() && callsSynchronizingHelper(Call, Opts))) {
    State.completePendingCopies();
    return;
  }
  if (const Expr *Module = moduleToReceiver(Call)) {
    ValueKey Key = keyOf(Module);
    if (!Key)
      return;
    if (const Expr *DeviceArg = argumentForParameter(Call, "device")) {
      ValueFacts F = State.get(Key);
      F.Device = evaluateDeviceSpec(DeviceArg, State);
      F.Device.Origin = Call.getExprLoc();
      State.set(Key, F);
    }
    return;
  }
  llvm::StringRef Method = tensorMethodName(Call);
  if (Method == "copy_") {
    ValueKey Key = keyOf(memberCallObject(Call));
    if (!Key)
      return;
    ValueFacts Dest = State.get(Key);
    ValueFacts Src = evaluate(Call.getArg(0), State);
    Dest.Graph = Src.Graph.Value == GraphState::InGraph ? Src.Graph : Dest.Graph;
    Dest.PendingDeviceToHostCopy = nullptr;
    if (Dest.Device.Value.isCPU() && Src.Device.Value.mayBeCUDA())
      if (std::optional<bool> NB =
              evaluateBool(argumentForParameter(Call, "non_blocking"), State))
        if (*NB)
          Dest.PendingDeviceToHostCopy = &Call;
    State.set(Key, Dest);
    return;
  }
  if (Method == "detach_" || Method == "requires_grad_") {
    ValueKey Key = keyOf(memberCallObject(Call));
    ValueFacts F = State.get(Key);
    F.Graph = {Method == "detach_" ? GraphState::NoGraph : GraphState::Unknown,
               Call.getExprLoc()};
    State.set(Key, F);
    return;
  }
  // Arguments passed by non-const reference to opaque code may change.
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD || tensorMethodName(Call) != "")
    return;
  unsigned Offset = isa<CXXOperatorCallExpr>(Call) && isa<CXXMethodDecl>(FD);
  for (unsigned I = 0; I < FD->getNumParams() && I + Offset < Call.getNumArgs();
       ++I) {
    QualType PT = FD->getParamDecl(I)->getType();
    if (PT->isReferenceType() && !PT.getNonReferenceType().isConstQualified())
      if (ValueKey Key = keyOf(Call.getArg(I + Offset))) {
        if (Key.Base && !Key.Field)
          State.forgetObject(Key.Base);
        State.forget(Key);
      }
  }
}

void TensorModel::transfer(const Stmt &S, TensorState &State) const {
  // A read of a pending copy's result is reported once: later reads are
  // not the first.
  llvm::SmallVector<const Expr *, 2> Reads;
  hostReadOperands(S, Reads);
  for (const Expr *Read : Reads)
    if (ValueKey Key = keyOf(Read))
      if (const ValueFacts *F = State.lookup(Key);
          F && F->PendingDeviceToHostCopy) {
        ValueFacts Done = *F;
        Done.PendingDeviceToHostCopy = nullptr;
        State.set(Key, Done);
      }

  if (const auto *DS = dyn_cast<DeclStmt>(&S)) {
    for (const Decl *D : DS->decls())
      if (const auto *VD = dyn_cast<VarDecl>(D)) {
        // A declaration (re)starts the variable and all its fields.
        State.forgetObject(VD);
        if (isTracked(VD) && !VD->getType()->isReferenceType())
          assign({VD, nullptr}, VD->getType(), VD->getInit(), VD->getLocation(),
                 State);
      }
    return;
  }
  if (const auto *BO = dyn_cast<BinaryOperator>(&S)) {
    if (BO->getOpcode() == BO_Assign)
      assign(keyOf(BO->getLHS()), BO->getLHS()->getType(), BO->getRHS(),
             BO->getExprLoc(), State);
    return;
  }
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&S)) {
    OverloadedOperatorKind K = Op->getOperator();
    if (K == OO_Equal && Op->getNumArgs() == 2) {
      assign(keyOf(Op->getArg(0)), Op->getArg(0)->getType(), Op->getArg(1),
             Op->getExprLoc(), State);
      return;
    }
    if ((K == OO_PlusEqual || K == OO_MinusEqual || K == OO_StarEqual ||
         K == OO_SlashEqual) &&
        Op->getNumArgs() == 2) {
      ValueKey Key = keyOf(Op->getArg(0));
      if (!Key)
        return;
      ValueFacts Acc = State.get(Key);
      ValueFacts Rhs = evaluate(Op->getArg(1), State);
      if (Rhs.Graph.Value == GraphState::InGraph)
        Acc.Graph = {GraphState::InGraph, Op->getExprLoc()};
      else if (Rhs.Graph.Value != Acc.Graph.Value)
        Acc.Graph = {GraphState::Unknown, {}};
      State.set(Key, Acc);
      return;
    }
  }
  if (const auto *Call = dyn_cast<CallExpr>(&S))
    applyCallEffects(*Call, State);
}

void TensorModel::refineOnBranch(const Expr *Cond, bool Taken,
                                 TensorState &State) const {
  if (!Cond)
    return;
  Cond = Cond->IgnoreImplicit()->IgnoreParenImpCasts();
  if (const auto *EWC = dyn_cast<ExprWithCleanups>(Cond))
    Cond = EWC->getSubExpr()->IgnoreParenImpCasts();
  if (const auto *Not = dyn_cast<UnaryOperator>(Cond))
    if (Not->getOpcode() == UO_LNot)
      return refineOnBranch(Not->getSubExpr(), !Taken, State);
  const auto *Call = dyn_cast<CallExpr>(Cond);
  if (!Call || !Taken)
    return;
  llvm::StringRef Method = tensorMethodName(*Call);
  if (Method != "is_pinned" && Method != "is_cuda")
    return;
  ValueKey Key = keyOf(memberCallObject(*Call));
  if (!Key)
    return;
  ValueFacts F = State.get(Key);
  if (Method == "is_pinned") {
    F.Pin = {Pinning::Pinned, Call->getExprLoc()};
    F.Device = {DeviceValue::cpu(), Call->getExprLoc()};
  } else if (!F.Device.Value.isCUDA()) {
    F.Device = {DeviceValue::cuda(), Call->getExprLoc()};
  }
  State.set(Key, F);
}

} // namespace clang::tidy::torch
