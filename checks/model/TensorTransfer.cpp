//===--- TensorTransfer.cpp - torch-tidy ----------------------------------===//
//
// TensorModel::transfer: how statements change the tracked state.
//
//===----------------------------------------------------------------------===//

#include "TensorModel.h"
#include "api/TorchMatchers.h"
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

  bool VisitLambdaExpr(LambdaExpr *L) {
    for (const LambdaCapture &C : L->captures())
      if (C.capturesVariable() && C.getCaptureKind() == LCK_ByRef)
        if (const auto *VD = dyn_cast<VarDecl>(C.getCapturedVar()))
          Escaped.insert(VD);
    return true;
  }

  /// `v.backward()`, `v.mean().backward()`, `(v / k).backward()`.
  bool VisitCXXMemberCallExpr(CXXMemberCallExpr *Call) {
    const CXXMethodDecl *MD = Call->getMethodDecl();
    if (!MD || !MD->getIdentifier() || MD->getName() != "backward" ||
        !isTensorType(MD->getThisType()->getPointeeType()))
      return true;
    if (const ValueDecl *V = backwardReceiver(Call->getImplicitObjectArgument()))
      Backward.try_emplace(V, Call);
    return true;
  }

  /// `cudaHostAlloc(&ptr, ...)`: `ptr` points to page-locked memory.
  bool VisitCallExpr(CallExpr *Call) {
    const FunctionDecl *FD = Call->getDirectCallee();
    if (!FD || !FD->getIdentifier() || Call->getNumArgs() == 0)
      return true;
    llvm::StringRef N = FD->getName();
    if (N != "cudaHostAlloc" && N != "cudaMallocHost" && N != "cuMemAllocHost" &&
        N != "cuMemHostAlloc")
      return true;
    const Expr *Arg = Call->getArg(0)->IgnoreParenCasts();
    if (const auto *UO = dyn_cast<UnaryOperator>(Arg);
        UO && UO->getOpcode() == UO_AddrOf)
      if (const auto *Ref =
              dyn_cast<DeclRefExpr>(UO->getSubExpr()->IgnoreParenCasts()))
        PinnedPointers.insert(Ref->getDecl());
    return true;
  }

  /// Writes of tensor variables: a declaration's initialiser, `=`, `+=`.
  bool VisitCXXOperatorCallExpr(CXXOperatorCallExpr *Op) {
    if (Op->isAssignmentOp() && Op->getNumArgs() == 2)
      if (const auto *Ref = dyn_cast<DeclRefExpr>(
              Op->getArg(0)->IgnoreParenImpCasts()))
        ++Writes[Ref->getDecl()];
    return true;
  }

  /// The variables on which backward() runs, written at most once.
  llvm::DenseMap<const ValueDecl *, const CallExpr *> backwardReceivers() const {
    llvm::DenseMap<const ValueDecl *, const CallExpr *> Out;
    for (const auto &[V, Call] : Backward) {
      unsigned W = Writes.lookup(V);
      const auto *VD = dyn_cast<VarDecl>(V);
      if (!VD || Escaped.contains(V))
        continue;
      // A parameter is written by its caller; a local by its initialiser.
      if ((isa<ParmVarDecl>(VD) && W == 0) ||
          (!isa<ParmVarDecl>(VD) && W == 0 && VD->hasInit()))
        Out.try_emplace(V, Call);
    }
    return Out;
  }

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

  bool VisitVarDecl(VarDecl *VD) {
    // A reference binds an alias: writes through it are invisible.
    if (VD->getType()->isReferenceType() && VD->getInit() &&
        !VD->getType().getNonReferenceType().isConstQualified())
      markEscaped(VD->getInit());
    return true;
  }

private:
  /// The variable whose value a backward() receiver is: through reductions
  /// and arithmetic with a non-tensor, not through detach().
  static const ValueDecl *backwardReceiver(const Expr *E) {
    for (unsigned Depth = 0; E && Depth < 8; ++Depth) {
      E = stripConversions(E);
      if (const auto *Ref = dyn_cast<DeclRefExpr>(E))
        return Ref->getDecl();
      if (const auto *Call = dyn_cast<CXXMemberCallExpr>(E)) {
        llvm::StringRef Name = tensorMethodName(*Call);
        if (Name != "mean" && Name != "sum" && Name != "squeeze")
          return nullptr;
        E = Call->getImplicitObjectArgument();
        continue;
      }
      if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E)) {
        if (Op->getNumArgs() != 2 ||
            (Op->getOperator() != OO_Slash && Op->getOperator() != OO_Star))
          return nullptr;
        bool LeftTensor = isTensorType(Op->getArg(0)->getType());
        bool RightTensor = isTensorType(Op->getArg(1)->getType());
        if (LeftTensor == RightTensor)
          return nullptr;
        E = LeftTensor ? Op->getArg(0) : Op->getArg(1);
        continue;
      }
      return nullptr;
    }
    return nullptr;
  }

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
  llvm::DenseMap<const ValueDecl *, const CallExpr *> Backward;
  llvm::DenseMap<const ValueDecl *, unsigned> Writes;

public:
  llvm::DenseSet<const ValueDecl *> PinnedPointers;
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
                         ASTContext &Ctx, const TorchApiOptions &Opts,
                         ProgramModel *Program)
    : Function(Function), Ctx(Ctx), Opts(Opts), Program(Program),
      NoGrad(Ctx) {
  llvm::SmallVector<SourceRange, 2> Ranges;
  FunctionScanner Scanner(Ctx, Ranges, Escaped);
  Scanner.TraverseStmt(const_cast<Stmt *>(&Body));
  NoGrad.addRanges(Ranges);
  BackwardReceivers = Scanner.backwardReceivers();
  PinnedHostPointers = std::move(Scanner.PinnedPointers);
}

/// A container or buffer class whose storage is ordinary heap memory.
static bool isHostBufferClass(QualType T) {
  const CXXRecordDecl *RD = T.getNonReferenceType()->getAsCXXRecordDecl();
  if (!RD || !RD->getIdentifier())
    return false;
  llvm::StringRef N = RD->getName();
  return (RD->isInStdNamespace() &&
          (N == "vector" || N == "array" || N == "basic_string" ||
           N == "unique_ptr")) ||
         N == "Mat"; // cv::Mat
}

Pinning TensorModel::userMemoryPinning(const Expr *Data) const {
  if (!Data)
    return Pinning::Unknown;
  Data = Data->IgnoreParenCasts();
  // `&buf[0]`, `&buf`
  if (const auto *UO = dyn_cast<UnaryOperator>(Data);
      UO && UO->getOpcode() == UO_AddrOf)
    Data = UO->getSubExpr()->IgnoreParenCasts();
  if (const auto *Sub = dyn_cast<CXXOperatorCallExpr>(Data);
      Sub && Sub->getOperator() == OO_Subscript)
    Data = Sub->getArg(0)->IgnoreParenCasts();
  if (const auto *Sub = dyn_cast<ArraySubscriptExpr>(Data))
    Data = Sub->getBase()->IgnoreParenCasts();
  // `buf.data()`, `mat.ptr<T>()`, `mat.data`
  const Expr *Object = nullptr;
  if (const auto *Call = dyn_cast<CXXMemberCallExpr>(Data)) {
    if (const CXXMethodDecl *MD = Call->getMethodDecl();
        MD && MD->getIdentifier() &&
        (MD->getName() == "data" || MD->getName() == "ptr" ||
         MD->getName() == "get"))
      Object = Call->getImplicitObjectArgument();
  } else if (const auto *ME = dyn_cast<MemberExpr>(Data)) {
    if (!ME->isArrow())
      Object = ME->getBase();
  } else {
    Object = Data;
  }
  if (!Object)
    return Pinning::Unknown;
  Object = Object->IgnoreParenImpCasts();
  const auto *Ref = dyn_cast<DeclRefExpr>(Object);
  const auto *Var = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
  if (!Var)
    return isHostBufferClass(Object->getType()) && isa<MemberExpr>(Object)
               ? Pinning::Pageable
               : Pinning::Unknown;
  if (PinnedHostPointers.contains(Var))
    return Pinning::Pinned;
  QualType T = Var->getType();
  if (isHostBufferClass(T) || T->isConstantArrayType())
    return Pinning::Pageable;
  // A pointer this function allocated: `new float[n]`, `malloc(n)`.
  if (T->isPointerType() && Var->hasLocalStorage() && !isa<ParmVarDecl>(Var) &&
      Var->getInit()) {
    const Expr *Init = Var->getInit()->IgnoreParenCasts();
    if (isa<CXXNewExpr>(Init))
      return Pinning::Pageable;
    if (const auto *Call = dyn_cast<CallExpr>(Init))
      if (const FunctionDecl *FD = Call->getDirectCallee())
        if (FD->getIdentifier() &&
            (FD->getName() == "malloc" || FD->getName() == "calloc"))
          return Pinning::Pageable;
  }
  return Pinning::Unknown;
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
    // Parameters of a freshly constructed module start on the CPU; a copy
    // of a handle shares its module.
    if (constructsNewModule(Init)) {
      if (!constructorMovesModule(Type))
        F.Device = {DeviceValue::cpu(), Loc};
    } else if (Init) {
      F.Device = evaluate(Init, State).Device;
    }
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
  // backward() runs on this value later: LibTorch requires a graph.
  if (Key.Base && !Key.Field && isTensorType(Type) &&
      F.Graph.Value == GraphState::Unknown)
    if (const CallExpr *Backward = BackwardReceivers.lookup(Key.Base))
      F.Graph = {GraphState::InGraph, Backward->getExprLoc()};
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
