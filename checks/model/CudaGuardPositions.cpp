//===--- CudaGuardPositions.cpp - torch-tidy ------------------------------===//
//
// Whether a statement can run without CUDA: reachable in its root's walk,
// and the root entered from at least one place that is itself unguarded;
// and whether a CPU selection on another branch makes it a fallback.
//
//===----------------------------------------------------------------------===//

#include "CudaAvailabilityGuardImpl.h"
#include "ProgramModel.h"
#include "CudaDeviceLiterals.h"
#include "clang/Basic/SourceManager.h"
#include "llvm/ADT/SmallVector.h"

namespace clang::tidy::torch {

using namespace cuda_guard;

//===--- Positions and entries -------------------------------------------===//

std::optional<bool> CudaAvailabilityGuard::Impl::reachableWithoutCuda(
    const Stmt &S, const RootKey &K, RootInfo *&Out) {
  Out = nullptr;
  if (!K.Body || isDependent(K))
    return std::nullopt;
  RootInfo &R = root(K);
  if (!R.Ok)
    return std::nullopt;
  const CFGBlock *B = R.SM->getBlock(&S);
  if (!B)
    return std::nullopt;
  Out = &R;
  return R.Reach.test(B->getBlockID());
}

bool CudaAvailabilityGuard::Impl::allGuarded(llvm::ArrayRef<Site> Sites,
                                             RootInfo &For) {
  unsigned Counted = 0;
  for (const Site &S : Sites) {
    RootInfo *R = nullptr;
    std::optional<bool> Reach = reachableWithoutCuda(*S.E, S.Root, R);
    if (!Reach)
      continue; // in a template pattern or unanalysable
    ++Counted;
    if (!*Reach)
      continue;
    if (!entryGuarded(*R)) {
      if (!For.FirstUnguardedSite)
        For.FirstUnguardedSite = S.E;
      return false;
    }
  }
  return Counted > 0;
}

const VarDecl *
CudaAvailabilityGuard::Impl::boundVariable(const LambdaExpr &L,
                                           const RootKey &Where) {
  ParentMap &PM = parentMap(Where);
  const Stmt *Child = &L;
  for (unsigned I = 0; I < 8; ++I) {
    const Stmt *P = PM.getParent(Child);
    if (const auto *DS = dyn_cast_or_null<DeclStmt>(P)) {
      for (const Decl *D : DS->decls())
        if (const auto *VD = dyn_cast<VarDecl>(D))
          if (VD->getInit() == Child && VD->isLocalVarDecl())
            return VD;
      return nullptr;
    }
    if (!P ||
        !isa<ImplicitCastExpr, MaterializeTemporaryExpr, CXXBindTemporaryExpr,
             FullExpr, CXXConstructExpr, CXXFunctionalCastExpr, ParenExpr>(P))
      return nullptr;
    Child = P;
  }
  return nullptr;
}

bool CudaAvailabilityGuard::Impl::computeEntryGuarded(RootInfo &R) {
  switch (R.Key.Kind) {
  case RootKind::GlobalInit:
    return false;
  case RootKind::FieldInit: {
    const auto *FD = cast<FieldDecl>(R.Key.Owner);
    const auto *Record = dyn_cast<CXXRecordDecl>(FD->getParent());
    if (!Record)
      return false;
    auto It = index().Constructions.find(Record->getCanonicalDecl());
    if (It == index().Constructions.end())
      return false;
    return allGuarded(It->second, R);
  }
  case RootKind::Lambda: {
    auto It = index().LambdaPositions.find(R.Key.Lambda);
    if (It == index().LambdaPositions.end())
      return false;
    for (const RootKey &Where : It->second) {
      if (isDependent(Where))
        continue;
      // Guarded where it is written...
      Site Here{R.Key.Lambda, Where};
      if (allGuarded(llvm::ArrayRef<Site>(Here), R))
        return true;
      R.FirstUnguardedSite = nullptr;
      // ...or wherever the variable holding it is used.
      if (const VarDecl *VD = boundVariable(*R.Key.Lambda, Where))
        return allGuarded(refsTo(VD), R);
      return false;
    }
    return false;
  }
  case RootKind::Function: {
    const auto *FD = cast<FunctionDecl>(R.Key.Owner);
    if (nameIn(*FD, Opts.DeviceSelectorFunctions))
      return true;
    if (FD->isMain())
      return false;
    // Every call in the program, as an earlier audit saw them.
    if (Program)
      if (std::optional<EntryContext> E = Program->entryContext(*FD);
          E && E->CudaGuarded)
        return true;
    llvm::SmallVector<Site, 8> Sites(refsTo(FD).begin(), refsTo(FD).end());
    if (const auto *Ctor = dyn_cast<CXXConstructorDecl>(FD)) {
      // make_shared<Net>() and TORCH_MODULE holders construct inside the
      // library; count those sites too.
      auto It =
          index().Constructions.find(Ctor->getParent()->getCanonicalDecl());
      if (It != index().Constructions.end())
        for (const Site &S : It->second) {
          const auto *CE = dyn_cast<CXXConstructExpr>(S.E);
          if (!CE || CE->getConstructor()->getParent() != Ctor->getParent())
            Sites.push_back(S);
        }
    }
    return allGuarded(Sites, R);
  }
  }
  return false;
}

bool CudaAvailabilityGuard::Impl::entryGuarded(RootInfo &R) {
  if (R.Entry == RootInfo::Guarded)
    return true;
  if (R.Entry == RootInfo::Unguarded)
    return false;
  if (R.Entry == RootInfo::InProgress) {
    AssumedDepth = std::min(AssumedDepth, R.StackDepth);
    return true;
  }
  if (Stack.size() > 16 || Budget == 0)
    return true; // too deep to tell: claim nothing
  --Budget;
  R.Entry = RootInfo::InProgress;
  R.StackDepth = Stack.size();
  Stack.push_back(&R);
  bool Result = computeEntryGuarded(R);
  Stack.pop_back();
  if (!Result || AssumedDepth >= R.StackDepth) {
    R.Entry = Result ? RootInfo::Guarded : RootInfo::Unguarded;
    if (AssumedDepth >= R.StackDepth)
      AssumedDepth = ~0U;
  } else {
    R.Entry = RootInfo::Unknown;
    R.FirstUnguardedSite = nullptr;
  }
  return Result;
}

//===--- CPU fallback -------------------------------------------------===//

/// Blocks reachable from the entry when the edge \p Index of \p Branch is
/// cut (in the plain CFG).
static llvm::BitVector reachWithoutEdge(const CFG &G, const CFGBlock *Branch,
                                        unsigned Index) {
  llvm::BitVector Seen(G.getNumBlockIDs());
  llvm::SmallVector<const CFGBlock *, 32> Work{&G.getEntry()};
  Seen.set(G.getEntry().getBlockID());
  while (!Work.empty()) {
    const CFGBlock *B = Work.pop_back_val();
    unsigned I = 0;
    for (const CFGBlock::AdjacentBlock &Succ : B->succs()) {
      unsigned ThisIndex = I++;
      const CFGBlock *S = Succ.getReachableBlock();
      if (!S || (B == Branch && ThisIndex == Index))
        continue;
      if (!Seen.test(S->getBlockID())) {
        Seen.set(S->getBlockID());
        Work.push_back(S);
      }
    }
  }
  return Seen;
}

void CudaAvailabilityGuard::Impl::collectCpuSelections(RootInfo &R) {
  if (R.CpuCollected)
    return;
  R.CpuCollected = true;
  forEachRootStmt(R, [&](const Stmt &S) {
    const auto *E = dyn_cast<Expr>(&S);
    if (!E)
      return;
    bool Cpu = isTensorCpuCall(*E);
    if (!Cpu && (isa<DeclRefExpr>(E) || isa<StringLiteral>(E)) &&
        classifyDeviceLiteral(*E) == DeviceLiteralKind::CPU)
      Cpu = classifyDeviceLiteralUse(*E, *R.PM, Opts) ==
            DeviceLiteralUse::Selection;
    if (!Cpu)
      return;
    if (const CFGBlock *B = R.SM->getBlock(E))
      R.CpuSelections.emplace_back(E, B);
  });
}

const Stmt *CudaAvailabilityGuard::Impl::findCpuFallback(RootInfo &R,
                                                         const CFGBlock &Use) {
  collectCpuSelections(R);
  if (R.CpuSelections.empty())
    return nullptr;
  const CFG &G = *R.Cfg;
  for (const CFGBlock *B : G) {
    if (B->succ_size() != 2 || !R.Reach.test(B->getBlockID()) ||
        R.Decided.count(B))
      continue;
    const Stmt *T = B->getTerminatorStmt();
    if (!T || !isa<IfStmt, ConditionalOperator>(T))
      continue;
    if (!B->succ_begin()->getReachableBlock() ||
        !(B->succ_begin() + 1)->getReachableBlock())
      continue;
    for (unsigned I = 0; I < 2; ++I) {
      if (reachWithoutEdge(G, B, I).test(Use.getBlockID()))
        continue; // the use does not depend on this edge
      llvm::BitVector Other = reachWithoutEdge(G, B, 1 - I);
      for (const auto &[Cpu, CpuBlock] : R.CpuSelections)
        if (!Other.test(CpuBlock->getBlockID()))
          return Cpu;
    }
  }
  return nullptr;
}

const Expr *CudaAvailabilityGuard::Impl::nonDominatingGuard(RootInfo &R) {
  const Expr *Best = nullptr;
  const SourceManager &SM = Ctx.getSourceManager();
  for (const auto &KV : R.Decided) {
    if (!mentionsAvailability(KV.second))
      continue;
    if (!Best || SM.isBeforeInTranslationUnit(KV.second->getBeginLoc(),
                                              Best->getBeginLoc()))
      Best = KV.second;
  }
  return Best;
}

} // namespace clang::tidy::torch
