//===--- CudaGuardValues.cpp - torch-tidy ---------------------------------===//
//
// The value a condition or scalar has when CUDA is not available: guard
// calls are false (or 0), and locals, parameters and members are followed
// to the values they are given.
//
//===----------------------------------------------------------------------===//

#include "CudaAvailabilityGuardImpl.h"
#include "CudaDeviceLiterals.h"
#include "model/UserCodeParents.h"
#include "clang/Analysis/Analyses/ExprMutationAnalyzer.h"
#include "clang/Basic/Builtins.h"

namespace clang::tidy::torch {

using namespace cuda_guard;

static std::optional<int64_t> compare(BinaryOperatorKind Op, int64_t L,
                                      int64_t R, bool Unsigned) {
  auto Cmp = [&](auto A, auto B) -> int64_t {
    switch (Op) {
    case BO_EQ:
      return A == B;
    case BO_NE:
      return A != B;
    case BO_LT:
      return A < B;
    case BO_GT:
      return A > B;
    case BO_LE:
      return A <= B;
    case BO_GE:
      return A >= B;
    default:
      return 0;
    }
  };
  if (Unsigned)
    return Cmp(static_cast<uint64_t>(L), static_cast<uint64_t>(R));
  return Cmp(L, R);
}

bool CudaAvailabilityGuard::Impl::isGuardFunction(const FunctionDecl &FD) {
  return nameIn(FD, GuardNames);
}

std::optional<int64_t>
CudaAvailabilityGuard::Impl::compareWithCuda(const Expr *L, const Expr *R,
                                             bool Equal) {
  const Expr *LL = stripToDeviceLiteral(L);
  const Expr *RL = stripToDeviceLiteral(R);
  DeviceLiteralKind LK =
      LL ? classifyDeviceLiteral(*LL) : DeviceLiteralKind::None;
  DeviceLiteralKind RK =
      RL ? classifyDeviceLiteral(*RL) : DeviceLiteralKind::None;
  if ((LK == DeviceLiteralKind::CUDA) == (RK == DeviceLiteralKind::CUDA))
    return std::nullopt;
  if (LK != DeviceLiteralKind::None && RK != DeviceLiteralKind::None)
    return std::nullopt;
  return Equal ? 0 : 1;
}

std::optional<int64_t> CudaAvailabilityGuard::Impl::eval(const Expr *E,
                                                         const Env *Vars,
                                                         RootInfo *R,
                                                         unsigned Depth) {
  if (!E || Depth > 12)
    return std::nullopt;
  E = E->IgnoreParens();
  if (E->isValueDependent() || E->isTypeDependent())
    return std::nullopt;
  if (E->getType()->isIntegralOrEnumerationType()) {
    Expr::EvalResult Res;
    if (E->EvaluateAsInt(Res, Ctx) && Res.Val.isInt())
      return Res.Val.getInt().getExtValue();
  }
  const unsigned D = Depth + 1;
  if (const auto *F = dyn_cast<FullExpr>(E))
    return eval(F->getSubExpr(), Vars, R, D);
  if (const auto *M = dyn_cast<MaterializeTemporaryExpr>(E))
    return eval(M->getSubExpr(), Vars, R, D);
  if (const auto *B = dyn_cast<CXXBindTemporaryExpr>(E))
    return eval(B->getSubExpr(), Vars, R, D);
  if (const auto *C = dyn_cast<CastExpr>(E)) {
    QualType T = C->getType();
    if (T->isBooleanType()) {
      std::optional<int64_t> V = eval(C->getSubExpr(), Vars, R, D);
      return V ? std::optional<int64_t>(*V != 0) : std::nullopt;
    }
    if (T->isIntegralOrEnumerationType() ||
        C->getCastKind() == CK_LValueToRValue || C->getCastKind() == CK_NoOp)
      return eval(C->getSubExpr(), Vars, R, D);
    return std::nullopt;
  }
  if (const auto *U = dyn_cast<UnaryOperator>(E)) {
    std::optional<int64_t> V = eval(U->getSubExpr(), Vars, R, D);
    if (!V)
      return std::nullopt;
    switch (U->getOpcode()) {
    case UO_LNot:
      return *V == 0;
    case UO_Minus:
      return -*V;
    case UO_Plus:
      return *V;
    default:
      return std::nullopt;
    }
  }
  if (const auto *BO = dyn_cast<BinaryOperator>(E))
    return evalBinary(BO->getOpcode(), BO->getLHS(), BO->getRHS(), Vars, R, D);
  if (const auto *CO = dyn_cast<ConditionalOperator>(E)) {
    std::optional<int64_t> C = eval(CO->getCond(), Vars, R, D);
    if (C)
      return eval(*C ? CO->getTrueExpr() : CO->getFalseExpr(), Vars, R, D);
    std::optional<int64_t> T = eval(CO->getTrueExpr(), Vars, R, D);
    std::optional<int64_t> F = eval(CO->getFalseExpr(), Vars, R, D);
    return T && F && *T == *F ? T : std::nullopt;
  }
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E)) {
    if (Op->getNumArgs() == 2 && (Op->getOperator() == OO_EqualEqual ||
                                  Op->getOperator() == OO_ExclaimEqual))
      return compareWithCuda(Op->getArg(0), Op->getArg(1),
                             Op->getOperator() == OO_EqualEqual);
    return std::nullopt;
  }
  if (const auto *Call = dyn_cast<CallExpr>(E)) {
    const FunctionDecl *FD = Call->getDirectCallee();
    if (!FD)
      return std::nullopt;
    unsigned Builtin = FD->getBuiltinID();
    if ((Builtin == Builtin::BI__builtin_expect ||
         Builtin == Builtin::BI__builtin_expect_with_probability) &&
        Call->getNumArgs() >= 1)
      return eval(Call->getArg(0), Vars, R, D);
    if (isGuardFunction(*FD))
      return 0;
    // A tensor on CUDA, or a Device of type CUDA, exists only where CUDA
    // does (a Device chosen without a check is reported where it is
    // chosen).
    if (const auto *MD = dyn_cast<CXXMethodDecl>(FD))
      if (MD->getDeclName().isIdentifier() && MD->getName() == "is_cuda" &&
          (isTensorRecord(MD->getParent()) || isDeviceRecord(MD->getParent()) ||
           isTensorOptionsRecord(MD->getParent())))
        return 0;
    return std::nullopt;
  }
  if (const auto *DRE = dyn_cast<DeclRefExpr>(E)) {
    const auto *VD = dyn_cast<VarDecl>(DRE->getDecl());
    if (!VD)
      return std::nullopt;
    if (R && R->Tracked.count(VD)) {
      if (!Vars)
        return std::nullopt;
      auto It = Vars->find(VD);
      return It == Vars->end() ? std::nullopt
                               : std::optional<int64_t>(It->second);
    }
    return stableVarValue(*VD, D);
  }
  if (const auto *ME = dyn_cast<MemberExpr>(E))
    if (const auto *FD = dyn_cast<FieldDecl>(ME->getMemberDecl()))
      return stableFieldValue(*FD, D);
  return std::nullopt;
}

std::optional<int64_t>
CudaAvailabilityGuard::Impl::evalBinary(BinaryOperatorKind Op, const Expr *LHS,
                                        const Expr *RHS, const Env *Vars,
                                        RootInfo *R, unsigned D) {
  if (Op == BO_LAnd || Op == BO_LOr) {
    // Kleene logic: a known dominating operand decides.
    bool Dominant = Op == BO_LOr;
    std::optional<int64_t> L = eval(LHS, Vars, R, D);
    if (L && (*L != 0) == Dominant)
      return Dominant;
    std::optional<int64_t> Rv = eval(RHS, Vars, R, D);
    if (Rv && (*Rv != 0) == Dominant)
      return Dominant;
    if (L && Rv)
      return !Dominant;
    return std::nullopt;
  }
  if (Op == BO_Comma || Op == BO_Assign)
    return eval(RHS, Vars, R, D);
  if (BinaryOperator::isEqualityOp(Op))
    if (std::optional<int64_t> V = compareWithCuda(LHS, RHS, Op == BO_EQ))
      return V;
  std::optional<int64_t> L = eval(LHS, Vars, R, D);
  std::optional<int64_t> Rv = eval(RHS, Vars, R, D);
  if (BinaryOperator::isComparisonOp(Op)) {
    bool Unsigned = LHS->getType()->isUnsignedIntegerOrEnumerationType();
    if (L && Rv)
      return compare(Op, *L, *Rv, Unsigned);
    // An unsigned value is never below 0: `i < device_count()` is false
    // for every `i` when there is no device.
    if (Unsigned && Rv && *Rv == 0) {
      if (Op == BO_LT)
        return 0;
      if (Op == BO_GE)
        return 1;
    }
    if (Unsigned && L && *L == 0) {
      if (Op == BO_GT)
        return 0;
      if (Op == BO_LE)
        return 1;
    }
    return std::nullopt;
  }
  if (!L || !Rv)
    return std::nullopt;
  switch (Op) {
  case BO_Add:
    return *L + *Rv;
  case BO_Sub:
    return *L - *Rv;
  case BO_Mul:
    return *L * *Rv;
  default:
    return std::nullopt;
  }
}

bool CudaAvailabilityGuard::Impl::mayBeWritten(const VarDecl &VD,
                                               const FunctionDecl &FD) {
  llvm::ArrayRef<Site> Refs = refsTo(&VD);
  if (llvm::all_of(Refs, [&](const Site &Ref) { return isPlainRead(Ref); }))
    return false;
  if (Refs.size() > MaxRefsForMutationAnalysis)
    return true;
  LimitedParentMapScope LocalParents(FD, Ctx);
  return ExprMutationAnalyzer(*FD.getBody(), Ctx).isMutated(&VD);
}

std::optional<int64_t>
CudaAvailabilityGuard::Impl::stableVarValue(const VarDecl &VD, unsigned Depth) {
  if (!VD.getType()->isIntegralOrEnumerationType() ||
      VD.getType().isVolatileQualified() || VD.getType()->isReferenceType())
    return std::nullopt;
  const Decl *Key = VD.getCanonicalDecl();
  auto Found = StableValues.find(Key);
  if (Found != StableValues.end())
    return Found->second;
  if (!StableInProgress.insert(Key).second)
    return std::nullopt;
  if (const auto *PVD = dyn_cast<ParmVarDecl>(&VD)) {
    std::optional<int64_t> V = parameterValue(*PVD, Depth);
    StableInProgress.erase(Key);
    StableValues[Key] = V;
    return V;
  }
  std::optional<int64_t> Result;
  const VarDecl *Def = nullptr;
  const Expr *Init = VD.getAnyInitializer(Def);
  bool Stable = false;
  if (Init) {
    if (VD.getType().isConstQualified()) {
      Stable = true;
    } else if (VD.isLocalVarDecl()) {
      const auto *FD =
          dyn_cast_or_null<FunctionDecl>(VD.getParentFunctionOrMethod());
      if (FD && FD->getBody())
        Stable = !mayBeWritten(VD, *FD);
    } else {
      Stable = true;
      for (const Site &Ref : refsTo(&VD))
        if (!isPlainRead(Ref)) {
          Stable = false;
          break;
        }
    }
  }
  if (Stable)
    Result = eval(Init, nullptr, nullptr, Depth);
  StableInProgress.erase(Key);
  StableValues[Key] = Result;
  return Result;
}

const CallExpr *CudaAvailabilityGuard::Impl::callOf(const Site &Ref) {
  ParentMap &PM = parentMap(Ref.Root);
  const Stmt *Child = Ref.E;
  for (unsigned I = 0; I < 3; ++I) {
    const Stmt *P = PM.getParent(Child);
    if (const auto *Call = dyn_cast_or_null<CallExpr>(P))
      return Call->getCallee()->IgnoreParenImpCasts() == Ref.E &&
                     !isa<CXXOperatorCallExpr>(Call)
                 ? Call
                 : nullptr;
    if (!P || !isa<ImplicitCastExpr, ParenExpr>(P))
      return nullptr;
    Child = P;
  }
  return nullptr;
}

std::optional<int64_t> CudaAvailabilityGuard::Impl::evalAt(const Expr &E,
                                                           RootInfo &R,
                                                           const Stmt &Point,
                                                           unsigned Depth) {
  const CFGBlock *B = R.SM->getBlock(&Point);
  if (!B || !R.In[B->getBlockID()])
    return std::nullopt;
  Env Vars = *R.In[B->getBlockID()];
  for (const CFGElement &El : *B) {
    std::optional<CFGStmt> CS = El.getAs<CFGStmt>();
    if (!CS)
      continue;
    if (CS->getStmt() == &Point)
      break;
    transfer(R, *CS->getStmt(), Vars);
  }
  return eval(&E, &Vars, &R, Depth);
}

std::optional<int64_t>
CudaAvailabilityGuard::Impl::parameterValue(const ParmVarDecl &PVD,
                                            unsigned Depth) {
  const auto *FD = dyn_cast<FunctionDecl>(PVD.getDeclContext());
  if (!FD || !FD->getBody() || FD->isVariadic())
    return std::nullopt;
  if (const auto *MD = dyn_cast<CXXMethodDecl>(FD))
    if (MD->isVirtual() || MD->getParent()->isLambda())
      return std::nullopt;
  if (mayBeWritten(PVD, *FD))
    return std::nullopt;
  unsigned Index = PVD.getFunctionScopeIndex();
  std::optional<int64_t> Common;
  unsigned Calls = 0;
  for (const Site &Ref : refsTo(FD)) {
    if (isDependent(Ref.Root))
      continue;
    const CallExpr *Call = callOf(Ref);
    if (!Call || Index >= Call->getNumArgs())
      return std::nullopt; // address taken, or an odd call
    RootInfo *Caller = nullptr;
    std::optional<bool> Reach = reachableWithoutCuda(*Call, Ref.Root, Caller);
    if (!Reach)
      return std::nullopt;
    if (!*Reach)
      continue; // never made without CUDA
    const Expr *Arg = Call->getArg(Index);
    if (const auto *Default = dyn_cast<CXXDefaultArgExpr>(Arg))
      Arg = Default->getExpr();
    std::optional<int64_t> V = evalAt(*Arg, *Caller, *Call, Depth + 1);
    if (!V || (Common && *Common != *V))
      return std::nullopt;
    Common = V;
    ++Calls;
  }
  return Calls ? Common : std::nullopt;
}

std::optional<int64_t>
CudaAvailabilityGuard::Impl::stableFieldValue(const FieldDecl &FD,
                                              unsigned Depth) {
  if (!FD.getType()->isIntegralOrEnumerationType() ||
      FD.getType().isVolatileQualified())
    return std::nullopt;
  const Decl *Key = FD.getCanonicalDecl();
  auto Found = StableValues.find(Key);
  if (Found != StableValues.end())
    return Found->second;
  if (!StableInProgress.insert(Key).second)
    return std::nullopt;
  auto Finish = [&](std::optional<int64_t> V) {
    StableInProgress.erase(Key);
    StableValues[Key] = V;
    return V;
  };
  for (const Site &Ref : refsTo(&FD))
    if (!isPlainRead(Ref))
      return Finish(std::nullopt);
  llvm::SmallVector<const Expr *, 4> Inits;
  if (const Expr *InClass = FD.getInClassInitializer())
    Inits.push_back(InClass);
  auto It = index().FieldInits.find(&FD);
  if (It != index().FieldInits.end())
    Inits.append(It->second.begin(), It->second.end());
  if (Inits.empty())
    return Finish(std::nullopt);
  // A user constructor that leaves the member to its default-initialiser
  // (or uninitialised) without an in-class initialiser: unknown.
  const auto *Record = dyn_cast<CXXRecordDecl>(FD.getParent());
  if (!Record)
    return Finish(std::nullopt);
  if (!FD.hasInClassInitializer())
    for (const CXXConstructorDecl *Ctor : Record->ctors()) {
      if (Ctor->isImplicit() || Ctor->isDeleted() ||
          Ctor->isCopyOrMoveConstructor())
        continue;
      bool Sets = false;
      for (const CXXCtorInitializer *Init : Ctor->inits())
        if (Init->isWritten() && Init->getMember() == &FD)
          Sets = true;
      if (!Sets)
        return Finish(std::nullopt);
    }
  std::optional<int64_t> Common;
  for (const Expr *Init : Inits) {
    std::optional<int64_t> V = eval(Init, nullptr, nullptr, Depth);
    if (!V || (Common && *Common != *V))
      return Finish(std::nullopt);
    Common = V;
  }
  return Finish(Common);
}

bool CudaAvailabilityGuard::Impl::mentionsAvailability(const Stmt *S,
                                                       unsigned Depth) {
  if (!S || Depth > 3)
    return false;
  if (const auto *Call = dyn_cast<CallExpr>(S))
    if (const FunctionDecl *FD = Call->getDirectCallee())
      if (isGuardFunction(*FD) ||
          (FD->getDeclName().isIdentifier() && FD->getName() == "is_cuda"))
        return true;
  if (const auto *DRE = dyn_cast<DeclRefExpr>(S))
    if (const auto *VD = dyn_cast<VarDecl>(DRE->getDecl()))
      if (VD->getInit() && mentionsAvailability(VD->getInit(), Depth + 1))
        return true;
  if (const auto *E = dyn_cast<Expr>(S))
    if (classifyDeviceLiteral(*E) == DeviceLiteralKind::CUDA)
      return true;
  for (const Stmt *Child : S->children())
    if (mentionsAvailability(Child, Depth))
      return true;
  return false;
}

} // namespace clang::tidy::torch
