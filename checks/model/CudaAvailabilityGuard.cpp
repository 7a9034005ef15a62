//===--- CudaAvailabilityGuard.cpp - torch-tidy ---------------------------===//
//
// The references and roots of the CUDA availability model, the walk of each
// root's CFG in the world without CUDA, and the public API.
//
//===----------------------------------------------------------------------===//

#include "CudaAvailabilityGuard.h"
#include "CudaAvailabilityGuardImpl.h"
#include "CudaDeviceLiterals.h"
#include "llvm/ADT/SmallVector.h"
#include <deque>

namespace clang::tidy::torch {

using namespace cuda_guard;

/// The availability queries LibTorch offers; each is false (or 0) without
/// CUDA.
constexpr llvm::StringLiteral DefaultGuardFunctions[] = {
    "torch::cuda::is_available",
    "torch::cuda::device_count",
    "torch::cuda::cudnn_is_available",
    "at::cuda::is_available",
    "at::cuda::device_count",
    "at::cuda::getNumGPUs",
    "c10::cuda::device_count",
    "at::hasCUDA",
    "at::Context::hasCUDA",
    "at::accelerator::deviceCount", // 2.7+; 0 without CUDA in a CUDA build
};

static bool isTrackableScalar(const VarDecl &VD) {
  QualType T = VD.getType();
  return !T->isReferenceType() && !T.isVolatileQualified() &&
         T->isIntegralOrEnumerationType() && !VD.isStaticLocal() &&
         !isa<ParmVarDecl>(VD);
}

static bool joinInto(Env &Into, const Env &From) {
  llvm::SmallVector<const VarDecl *, 4> Drop;
  for (const auto &KV : Into) {
    auto It = From.find(KV.first);
    if (It == From.end() || It->second != KV.second)
      Drop.push_back(KV.first);
  }
  for (const VarDecl *VD : Drop)
    Into.erase(VD);
  return !Drop.empty();
}

static bool isBranchTerminator(const Stmt *T) {
  if (!T)
    return false;
  if (const auto *BO = dyn_cast<BinaryOperator>(T))
    return BO->isLogicalOp();
  return isa<IfStmt, ConditionalOperator, WhileStmt, DoStmt, ForStmt>(T);
}

/// The condition a branch block decides. A block that ends a chain of
/// `&&`/`||` is only reached when the operands before its own did not
/// short-circuit, so only the rightmost operand is its condition.
static const Expr *branchCondition(const CFGBlock &B) {
  const auto *Cond = dyn_cast_or_null<Expr>(
      const_cast<CFGBlock &>(B).getTerminatorCondition(false));
  while (Cond) {
    const auto *BO = dyn_cast<BinaryOperator>(Cond->IgnoreParenImpCasts());
    if (!BO || !BO->isLogicalOp())
      break;
    Cond = BO->getRHS();
  }
  return Cond;
}

CudaAvailabilityGuard::Impl::Impl(ASTContext &Ctx, CudaGuardOptions O)
    : Ctx(Ctx), Opts(std::move(O)) {
  for (llvm::StringRef N : DefaultGuardFunctions)
    GuardNames.push_back(N.str());
  for (std::string &N : Opts.GuardFunctions) {
    llvm::StringRef S(N);
    S.consume_front("::");
    N = S.str();
    GuardNames.push_back(N);
  }
  for (std::string &N : Opts.DeviceSelectorFunctions) {
    llvm::StringRef S(N);
    S.consume_front("::");
    N = S.str();
  }
}

//===--- References --------------------------------------------------===//

TUIndex &CudaAvailabilityGuard::Impl::index() {
  if (!Index)
    Index = cuda_guard::indexUserCode(Ctx);
  return *Index;
}

llvm::ArrayRef<Site> CudaAvailabilityGuard::Impl::refsTo(const Decl *D) {
  auto It = index().Refs.find(D->getCanonicalDecl());
  if (It == index().Refs.end())
    return {};
  return It->second;
}

ParentMap &CudaAvailabilityGuard::Impl::parentMap(const RootKey &K) {
  std::unique_ptr<ParentMap> &PM = ParentMaps[K.Body];
  if (!PM) {
    PM = std::make_unique<ParentMap>(K.Body);
    if (const auto *Ctor = dyn_cast<CXXConstructorDecl>(K.Owner))
      if (K.Kind == RootKind::Function)
        for (const CXXCtorInitializer *Init : Ctor->inits())
          if (Init->isWritten() && Init->getInit())
            PM->addStmt(Init->getInit());
  }
  return *PM;
}

bool CudaAvailabilityGuard::Impl::isPlainRead(const Site &Ref) {
  if (isDependent(Ref.Root))
    return true;
  const Stmt *P = parentMap(Ref.Root).getParentIgnoreParens(Ref.E);
  const auto *Cast = dyn_cast_or_null<ImplicitCastExpr>(P);
  return Cast && Cast->getCastKind() == CK_LValueToRValue;
}

//===--- Roots -------------------------------------------------------===//

bool CudaAvailabilityGuard::Impl::isDependent(const RootKey &K) {
  if (const auto *DC = dyn_cast<DeclContext>(K.Owner))
    return DC->isDependentContext();
  return K.Owner->getDeclContext()->isDependentContext();
}

RootInfo &CudaAvailabilityGuard::Impl::root(const RootKey &K) {
  auto Found = Roots.find(K.Body);
  if (Found != Roots.end())
    return *Found->second;
  // Building may analyse other roots (call sites of a parameter) and grow
  // the map; keep a stable pointer.
  RootInfo *R = (Roots[K.Body] = std::make_unique<RootInfo>()).get();
  R->Key = K;
  build(*R);
  return *R;
}

void CudaAvailabilityGuard::Impl::build(RootInfo &R) {
  if (isDependent(R.Key))
    return;
  CFG::BuildOptions BO;
  BO.setAllAlwaysAdd();
  const auto *Ctor = dyn_cast<CXXConstructorDecl>(R.Key.Owner);
  if (Ctor && R.Key.Kind == RootKind::Function)
    BO.AddInitializers = true;
  R.Cfg = CFG::buildCFG(R.Key.Owner, R.Key.Body, &Ctx, BO);
  if (!R.Cfg)
    return;
  R.PM = &parentMap(R.Key);
  R.SM.reset(CFGStmtMap::Build(R.Cfg.get(), R.PM));
  if (!R.SM)
    return;
  collectTracked(R);
  runWithoutCuda(R);
  R.Ok = true;
}

void CudaAvailabilityGuard::Impl::forEachRootStmt(
    RootInfo &R, const std::function<void(const Stmt &)> &F) {
  forEachStmt(R.Key.Body, F);
  if (const auto *Ctor = dyn_cast<CXXConstructorDecl>(R.Key.Owner))
    if (R.Key.Kind == RootKind::Function)
      for (const CXXCtorInitializer *Init : Ctor->inits())
        if (Init->isWritten())
          forEachStmt(Init->getInit(), F);
}

void CudaAvailabilityGuard::Impl::collectTracked(RootInfo &R) {
  llvm::DenseSet<const VarDecl *> Escaped;
  forEachRootStmt(R, [&](const Stmt &S) {
    if (const auto *DS = dyn_cast<DeclStmt>(&S)) {
      for (const Decl *D : DS->decls())
        if (const auto *VD = dyn_cast<VarDecl>(D))
          if (isTrackableScalar(*VD))
            R.Tracked.insert(VD);
      return;
    }
    if (const auto *L = dyn_cast<LambdaExpr>(&S)) {
      for (const LambdaCapture &C : L->captures())
        if (C.capturesVariable() && C.getCaptureKind() == LCK_ByRef)
          if (const auto *VD = dyn_cast<VarDecl>(C.getCapturedVar()))
            Escaped.insert(VD);
      return;
    }
    const auto *DRE = dyn_cast<DeclRefExpr>(&S);
    if (!DRE)
      return;
    const auto *VD = dyn_cast<VarDecl>(DRE->getDecl());
    if (!VD)
      return;
    const Stmt *Child = DRE;
    const Stmt *Parent = R.PM->getParent(Child);
    while (Parent && isa<ParenExpr>(Parent)) {
      Child = Parent;
      Parent = R.PM->getParent(Parent);
    }
    if (const auto *Cast = dyn_cast_or_null<ImplicitCastExpr>(Parent))
      if (Cast->getCastKind() == CK_LValueToRValue)
        return;
    if (const auto *BO = dyn_cast_or_null<BinaryOperator>(Parent))
      if (BO->isAssignmentOp() && BO->getLHS() == Child)
        return;
    if (const auto *UO = dyn_cast_or_null<UnaryOperator>(Parent))
      if (UO->isIncrementDecrementOp())
        return;
    Escaped.insert(VD);
  });
  for (const VarDecl *VD : Escaped)
    R.Tracked.erase(VD);
}

const VarDecl *CudaAvailabilityGuard::Impl::trackedLHS(RootInfo &R,
                                                       const Expr *E) {
  const auto *DRE = dyn_cast<DeclRefExpr>(E->IgnoreParens());
  const auto *VD = DRE ? dyn_cast<VarDecl>(DRE->getDecl()) : nullptr;
  return VD && R.Tracked.count(VD) ? VD : nullptr;
}

void CudaAvailabilityGuard::Impl::transfer(RootInfo &R, const Stmt &S, Env &E) {
  if (const auto *DS = dyn_cast<DeclStmt>(&S)) {
    for (const Decl *D : DS->decls()) {
      const auto *VD = dyn_cast<VarDecl>(D);
      if (!VD || !R.Tracked.count(VD))
        continue;
      std::optional<int64_t> V;
      if (const Expr *Init = VD->getInit())
        V = eval(Init, &E, &R, 0);
      if (V)
        E[VD] = *V;
      else
        E.erase(VD);
    }
    return;
  }
  if (const auto *BO = dyn_cast<BinaryOperator>(&S)) {
    if (!BO->isAssignmentOp())
      return;
    const VarDecl *VD = trackedLHS(R, BO->getLHS());
    if (!VD)
      return;
    std::optional<int64_t> V;
    if (BO->getOpcode() == BO_Assign)
      V = eval(BO->getRHS(), &E, &R, 0);
    if (V)
      E[VD] = *V;
    else
      E.erase(VD);
    return;
  }
  if (const auto *UO = dyn_cast<UnaryOperator>(&S))
    if (UO->isIncrementDecrementOp())
      if (const VarDecl *VD = trackedLHS(R, UO->getSubExpr()))
        E.erase(VD);
}

void CudaAvailabilityGuard::Impl::runWithoutCuda(RootInfo &R) {
  const CFG &G = *R.Cfg;
  unsigned N = G.getNumBlockIDs();
  std::vector<std::optional<Env>> &In = R.In;
  In.assign(N, std::nullopt);
  llvm::BitVector Queued(N);
  std::deque<const CFGBlock *> Work;
  const CFGBlock &Entry = G.getEntry();
  In[Entry.getBlockID()] = Env();
  Work.push_back(&Entry);
  Queued.set(Entry.getBlockID());
  unsigned Steps = 0;
  while (!Work.empty() && ++Steps < 100000) {
    const CFGBlock *B = Work.front();
    Work.pop_front();
    Queued.reset(B->getBlockID());
    Env Out = *In[B->getBlockID()];
    for (const CFGElement &El : *B)
      if (std::optional<CFGStmt> CS = El.getAs<CFGStmt>())
        transfer(R, *CS->getStmt(), Out);

    std::optional<bool> Taken;
    const Stmt *Term = B->getTerminatorStmt();
    if (B->succ_size() == 2 && isBranchTerminator(Term)) {
      const Expr *Cond = branchCondition(*B);
      if (Cond)
        if (std::optional<int64_t> V = eval(Cond, &Out, &R, 0)) {
          Taken = *V != 0;
          R.Decided[B] = Cond;
        }
    }
    unsigned Index = 0;
    for (const CFGBlock::AdjacentBlock &Succ : B->succs()) {
      unsigned ThisIndex = Index++;
      const CFGBlock *S = Succ.getReachableBlock();
      if (!S)
        continue;
      if (Taken && (ThisIndex == 0) != *Taken)
        continue;
      std::optional<Env> &Target = In[S->getBlockID()];
      bool Changed = false;
      if (!Target) {
        Target = Out;
        Changed = true;
      } else {
        Changed = joinInto(*Target, Out);
      }
      if (Changed && !Queued.test(S->getBlockID())) {
        Queued.set(S->getBlockID());
        Work.push_back(S);
      }
    }
  }
  R.Reach.resize(N);
  for (unsigned I = 0; I < N; ++I)
    if (In[I])
      R.Reach.set(I);
  // A decision recorded on an early visit may have been undone by a later
  // join (a loop counter); keep only the branches decided at the fixpoint.
  llvm::SmallVector<const CFGBlock *, 4> Undecided;
  for (const auto &KV : R.Decided) {
    const CFGBlock *B = KV.first;
    Env Out = *In[B->getBlockID()];
    for (const CFGElement &El : *B)
      if (std::optional<CFGStmt> CS = El.getAs<CFGStmt>())
        transfer(R, *CS->getStmt(), Out);
    if (!eval(KV.second, &Out, &R, 0))
      Undecided.push_back(B);
  }
  for (const CFGBlock *B : Undecided)
    R.Decided.erase(B);
}

//===--- Driver -------------------------------------------------------===//

std::vector<CudaAvailabilityGuard::Finding>
CudaAvailabilityGuard::Impl::findUnguardedSelections() {
  std::vector<Finding> Out;
  llvm::DenseSet<SourceLocation> Seen;
  for (const Site &C : index().Candidates) {
    if (isDependent(C.Root))
      continue;
    SourceLocation Loc = C.E->getBeginLoc();
    if (const auto *Call = dyn_cast<CXXMemberCallExpr>(C.E)) {
      if (const auto *ME = dyn_cast<MemberExpr>(Call->getCallee()))
        Loc = ME->getMemberLoc();
    } else if (classifyDeviceLiteralUse(*C.E, parentMap(C.Root), Opts) !=
               DeviceLiteralUse::Selection) {
      continue;
    }
    if (Seen.contains(Loc))
      continue;
    RootInfo *R = nullptr;
    std::optional<bool> Reach = reachableWithoutCuda(*C.E, C.Root, R);
    if (!Reach || !*Reach || entryGuarded(*R))
      continue;
    const CFGBlock *B = R->SM->getBlock(C.E);
    if (!B || findCpuFallback(*R, *B))
      continue;
    Seen.insert(Loc);
    Finding F;
    F.Use = C.E;
    F.Loc = Loc;
    F.NonDominatingGuard = nonDominatingGuard(*R);
    F.UnguardedCallSite = R->FirstUnguardedSite;
    F.Root = R->Key.Body;
    Out.push_back(F);
  }
  return Out;
}

CudaAvailabilityGuard::CudaAvailabilityGuard(ASTContext &Ctx,
                                             CudaGuardOptions Opts,
                                             ProgramModel *Program)
    : P(std::make_unique<Impl>(Ctx, std::move(Opts))) {
  P->Program = Program;
}

bool CudaAvailabilityGuard::isGuardedCall(const Expr &Call,
                                          const FunctionDecl &Caller) {
  const FunctionDecl *Definition = nullptr;
  if (!Caller.hasBody(Definition) || !Definition)
    return false;
  cuda_guard::RootKey K{cuda_guard::RootKind::Function, Definition, nullptr,
                        Definition->getBody()};
  Impl::RootInfo *R = nullptr;
  std::optional<bool> Reach = P->reachableWithoutCuda(Call, K, R);
  if (!Reach || !R)
    return false;
  return !*Reach || P->entryGuarded(*R);
}

CudaAvailabilityGuard::~CudaAvailabilityGuard() = default;

std::vector<CudaAvailabilityGuard::Finding>
CudaAvailabilityGuard::findUnguardedSelections() {
  return P->findUnguardedSelections();
}

std::optional<int64_t> CudaAvailabilityGuard::valueWithoutCuda(const Expr &E) {
  return P->eval(&E, nullptr, nullptr, 0);
}

} // namespace clang::tidy::torch
