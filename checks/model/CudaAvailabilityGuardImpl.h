//===--- CudaAvailabilityGuardImpl.h - torch-tidy ---------------*- C++ -*-===//
//
// Private to the CUDA availability model: the per-root analysis state and
// CudaAvailabilityGuard::Impl, whose methods are defined in
//   CudaAvailabilityGuard.cpp  references, roots (the CFG walk), driver;
//   CudaGuardValues.cpp        values of expressions without CUDA;
//   CudaGuardPositions.cpp     reachability, guarded entries, CPU fallback.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_ANALYSIS_CUDAAVAILABILITYGUARDIMPL_H
#define TORCH_TIDY_ANALYSIS_CUDAAVAILABILITYGUARDIMPL_H

#include "CudaAvailabilityGuard.h"
#include "CudaUseIndex.h"
#include "clang/Analysis/CFG.h"
#include "clang/Analysis/CFGStmtMap.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseSet.h"
#include <functional>

namespace clang::tidy::torch {

namespace cuda_guard {

using Env = llvm::DenseMap<const VarDecl *, int64_t>;

/// The analysis of one root in the world without CUDA.
struct RootInfo {
  RootKey Key;
  bool Ok = false;
  std::unique_ptr<CFG> Cfg;
  ParentMap *PM = nullptr; // owned by Impl::ParentMaps
  std::unique_ptr<CFGStmtMap> SM;
  /// Blocks reachable when CUDA is not available.
  llvm::BitVector Reach;
  /// Branch blocks whose condition is decided when CUDA is not available,
  /// with that condition.
  llvm::DenseMap<const CFGBlock *, const Expr *> Decided;
  /// Scalar locals whose values the CFG walk tracks.
  llvm::DenseSet<const VarDecl *> Tracked;
  /// Their values at each block's entry; nullopt where the block is not
  /// reached without CUDA.
  std::vector<std::optional<Env>> In;
  /// Entry guard state.
  enum { Unknown, InProgress, Guarded, Unguarded } Entry = Unknown;
  unsigned StackDepth = 0;
  const Expr *FirstUnguardedSite = nullptr;
  /// CPU selections in this root, with their blocks; built on demand.
  bool CpuCollected = false;
  std::vector<std::pair<const Stmt *, const CFGBlock *>> CpuSelections;
};

} // namespace cuda_guard

struct CudaAvailabilityGuard::Impl {
  using Env = cuda_guard::Env;
  using RootInfo = cuda_guard::RootInfo;
  using RootKey = cuda_guard::RootKey;
  using Site = cuda_guard::Site;
  using TUIndex = cuda_guard::TUIndex;

  ASTContext &Ctx;
  CudaGuardOptions Opts;
  ProgramModel *Program = nullptr;
  std::vector<std::string> GuardNames;
  llvm::DenseMap<const Stmt *, std::unique_ptr<RootInfo>> Roots;
  llvm::DenseMap<const Stmt *, std::unique_ptr<ParentMap>> ParentMaps;
  std::unique_ptr<TUIndex> Index;
  std::vector<RootInfo *> Stack;
  unsigned AssumedDepth = ~0U;
  unsigned Budget = 4000;
  llvm::DenseMap<const Decl *, std::optional<int64_t>> StableValues;
  llvm::DenseSet<const Decl *> StableInProgress;

  Impl(ASTContext &Ctx, CudaGuardOptions O);

  //===--- References --------------------------------------------------===//

  TUIndex &index();
  llvm::ArrayRef<Site> refsTo(const Decl *D);
  /// The parent map of a root's code (for a constructor, its initialisers
  /// too).
  ParentMap &parentMap(const RootKey &K);
  /// A read of a scalar: the reference is only converted to an rvalue.
  /// References in template patterns are ignored (their instantiations are
  /// seen).
  bool isPlainRead(const Site &Ref);

  //===--- Roots -------------------------------------------------------===//

  static bool isDependent(const RootKey &K);
  RootInfo &root(const RootKey &K);
  void build(RootInfo &R);
  void forEachRootStmt(RootInfo &R, const std::function<void(const Stmt &)> &F);
  /// Scalar locals declared in the root whose every use is a read, a plain
  /// assignment, or an increment: their values can be followed.
  void collectTracked(RootInfo &R);
  const VarDecl *trackedLHS(RootInfo &R, const Expr *E);
  void transfer(RootInfo &R, const Stmt &S, Env &E);
  /// The forward worklist walk of the world without CUDA.
  void runWithoutCuda(RootInfo &R);

  //===--- Values without CUDA -------------------------------------------===//

  bool isGuardFunction(const FunctionDecl &FD);
  /// `X == kCUDA` / `X != kCUDA` (DeviceType or Device): X is never CUDA
  /// when CUDA is not available, unless X itself is a CUDA literal.
  std::optional<int64_t> compareWithCuda(const Expr *L, const Expr *R,
                                         bool Equal);
  std::optional<int64_t> eval(const Expr *E, const Env *Vars, RootInfo *R,
                              unsigned Depth);
  std::optional<int64_t> evalBinary(BinaryOperatorKind Op, const Expr *LHS,
                                    const Expr *RHS, const Env *Vars,
                                    RootInfo *R, unsigned D);
  /// Whether the local or parameter \p VD of \p FD may be written in \p FD.
  /// Plain reads are recognised from the reference index in linear time;
  /// ExprMutationAnalyzer, whose cost is the number of references times the
  /// size of the body, is asked only about the rest, and only up to
  /// MaxRefsForMutationAnalysis references (beyond, "may be written").
  bool mayBeWritten(const VarDecl &VD, const FunctionDecl &FD);
  static constexpr size_t MaxRefsForMutationAnalysis = 256;
  /// The value of a variable that is never written after its initialiser.
  std::optional<int64_t> stableVarValue(const VarDecl &VD, unsigned Depth);
  /// The call whose callee is the reference \p Ref, or null.
  const CallExpr *callOf(const Site &Ref);
  /// The value \p E has at \p Point (a statement of root \p R), following the
  /// tracked locals up to there.
  std::optional<int64_t> evalAt(const Expr &E, RootInfo &R, const Stmt &Point,
                                unsigned Depth);
  /// A scalar parameter that the function never writes, and that every call
  /// in the TU that can run without CUDA passes the same known value:
  /// `void train(bool use_cuda)` called as
  /// `train(torch::cuda::is_available())`.
  std::optional<int64_t> parameterValue(const ParmVarDecl &PVD, unsigned Depth);
  /// The value of a scalar member that every constructor sets to the same
  /// value and nothing assigns.
  std::optional<int64_t> stableFieldValue(const FieldDecl &FD, unsigned Depth);
  /// Whether \p E syntactically consults CUDA availability.
  bool mentionsAvailability(const Stmt *S, unsigned Depth = 0);

  //===--- Positions and entries
  //-------------------------------------------===//

  /// True, false, or nullopt when \p S (in root \p K) is not analysable (no
  /// CFG, template pattern).
  std::optional<bool> reachableWithoutCuda(const Stmt &S, const RootKey &K,
                                           RootInfo *&Out);
  /// All of \p Sites (at least one that is analysable) are guarded.
  bool allGuarded(llvm::ArrayRef<Site> Sites, RootInfo &For);
  /// The local variable a lambda is stored in (`auto f = [] {...};`).
  const VarDecl *boundVariable(const LambdaExpr &L, const RootKey &Where);
  bool computeEntryGuarded(RootInfo &R);
  /// Whether every way into \p R passes a guard. Recursion through callers is
  /// answered optimistically inside a cycle (greatest fixpoint); results that
  /// relied on such an assumption are not cached.
  bool entryGuarded(RootInfo &R);

  //===--- CPU fallback -------------------------------------------------===//

  void collectCpuSelections(RootInfo &R);
  /// A branch that does not test availability and that leads to \p Use one
  /// way and to a CPU selection the other way.
  const Stmt *findCpuFallback(RootInfo &R, const CFGBlock &Use);
  const Expr *nonDominatingGuard(RootInfo &R);

  //===--- Driver -------------------------------------------------------===//

  std::vector<Finding> findUnguardedSelections();
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_ANALYSIS_CUDAAVAILABILITYGUARDIMPL_H
