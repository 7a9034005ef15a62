//===--- CudaAvailabilityGuard.cpp - torch-tidy ---------------------------===//

#include "CudaAvailabilityGuard.h"
#include "utils/TorchMatchers.h"
#include "utils/UserCodeParents.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMap.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/AST/StmtCXX.h"
#include "clang/Analysis/Analyses/ExprMutationAnalyzer.h"
#include "clang/Analysis/CFG.h"
#include "clang/Analysis/CFGStmtMap.h"
#include "clang/Basic/Builtins.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringSet.h"
#include <deque>
#include <functional>

namespace clang::tidy::torch {

//===----------------------------------------------------------------------===//
// LibTorch vocabulary
//===----------------------------------------------------------------------===//

namespace {

/// The availability queries LibTorch offers; each is false (or 0) without
/// CUDA.
constexpr llvm::StringLiteral DefaultGuardFunctions[] = {
    "torch::cuda::is_available", "torch::cuda::device_count",
    "torch::cuda::cudnn_is_available", "at::cuda::is_available",
    "at::cuda::device_count", "at::cuda::getNumGPUs",
    "c10::cuda::device_count", "at::hasCUDA", "at::Context::hasCUDA",
};

std::string qualifiedName(const NamedDecl &D) {
  return D.getQualifiedNameAsString();
}

const CXXRecordDecl *recordOf(QualType T) {
  if (T.isNull())
    return nullptr;
  return T.getNonReferenceType().getCanonicalType()->getAsCXXRecordDecl();
}

bool isRecordNamed(const CXXRecordDecl *RD, llvm::StringRef Name) {
  return RD && RD->getQualifiedNameAsString() == Name;
}

bool isDeviceRecord(const CXXRecordDecl *RD) {
  return isRecordNamed(RD, "c10::Device");
}
bool isTensorOptionsRecord(const CXXRecordDecl *RD) {
  return isRecordNamed(RD, "c10::TensorOptions");
}
bool isTensorRecord(const CXXRecordDecl *RD) {
  return isRecordNamed(RD, "at::Tensor") || isRecordNamed(RD, "at::TensorBase");
}
bool isStdStringRecord(const CXXRecordDecl *RD) {
  if (!RD)
    return false;
  std::string N = RD->getQualifiedNameAsString();
  return N == "std::basic_string" || N == "std::__cxx11::basic_string" ||
         N == "std::basic_string_view" || N == "c10::basic_string_view";
}
/// `c10::optional<c10::Device>` / `std::optional<c10::Device>`.
bool isOptionalDeviceRecord(const CXXRecordDecl *RD) {
  const auto *Spec = dyn_cast_or_null<ClassTemplateSpecializationDecl>(RD);
  if (!Spec || Spec->getName() != "optional")
    return false;
  const TemplateArgumentList &Args = Spec->getTemplateArgs();
  return Args.size() == 1 && Args[0].getKind() == TemplateArgument::Type &&
         isDeviceRecord(recordOf(Args[0].getAsType()));
}
bool isDeviceCarrier(const CXXRecordDecl *RD) {
  return isDeviceRecord(RD) || isTensorOptionsRecord(RD) ||
         isOptionalDeviceRecord(RD);
}

bool inTorchNamespace(const FunctionDecl &FD) {
  std::string N = qualifiedName(FD);
  llvm::StringRef S(N);
  return S.starts_with("c10::") || S.starts_with("at::") ||
         S.starts_with("torch::");
}

/// Functions that take a device, possibly through a forwarding template
/// (`TensorOptions::device(Args&&...)`), so that a DeviceType argument is
/// itself the selection.
bool isDeviceTakingFunction(const FunctionDecl &FD) {
  if (!FD.getDeclName().isIdentifier())
    return false;
  llvm::StringRef Name = FD.getName();
  return (Name == "to" || Name == "device" || Name == "set_device") &&
         inTorchNamespace(FD);
}

bool nameIn(const FunctionDecl &FD, const std::vector<std::string> &Names) {
  if (Names.empty())
    return false;
  std::string N = qualifiedName(FD);
  for (const std::string &Want : Names)
    if (N == Want)
      return true;
  return false;
}

/// Skips the wrappers a device literal travels through on its way to a
/// Device: casts, temporaries, `std::string` and Device construction.
const Expr *stripToDeviceLiteral(const Expr *E) {
  for (unsigned I = 0; E && I < 16; ++I) {
    E = E->IgnoreParenImpCasts();
    if (const auto *M = dyn_cast<MaterializeTemporaryExpr>(E))
      E = M->getSubExpr();
    else if (const auto *B = dyn_cast<CXXBindTemporaryExpr>(E))
      E = B->getSubExpr();
    else if (const auto *F = dyn_cast<FullExpr>(E))
      E = F->getSubExpr();
    else if (const auto *C = dyn_cast<ExplicitCastExpr>(E))
      E = C->getSubExpr();
    else if (const auto *CE = dyn_cast<CXXConstructExpr>(E)) {
      const CXXRecordDecl *RD = CE->getConstructor()->getParent();
      if (CE->getNumArgs() >= 1 &&
          (isDeviceCarrier(RD) || isStdStringRecord(RD)))
        E = CE->getArg(0);
      else
        return E;
    } else
      return E;
  }
  return E;
}

} // namespace

DeviceLiteralKind classifyDeviceLiteral(const Expr &E) {
  const Expr *X = E.IgnoreParenImpCasts();
  if (const auto *DRE = dyn_cast<DeclRefExpr>(X)) {
    const ValueDecl *D = DRE->getDecl();
    llvm::StringRef Name = D->getDeclName().isIdentifier() ? D->getName() : "";
    if (const auto *ECD = dyn_cast<EnumConstantDecl>(D)) {
      const auto *ED = dyn_cast<EnumDecl>(ECD->getDeclContext());
      if (!ED || ED->getQualifiedNameAsString() != "c10::DeviceType")
        return DeviceLiteralKind::None;
      if (Name == "CUDA")
        return DeviceLiteralKind::CUDA;
      if (Name == "CPU")
        return DeviceLiteralKind::CPU;
      return DeviceLiteralKind::None;
    }
    if (const auto *VD = dyn_cast<VarDecl>(D)) {
      if ((Name != "kCUDA" && Name != "kCPU") ||
          !isDeviceTypeEnum(VD->getType()))
        return DeviceLiteralKind::None;
      const auto *NS = dyn_cast<NamespaceDecl>(VD->getDeclContext());
      if (!NS || NS->getQualifiedNameAsString() != "c10")
        return DeviceLiteralKind::None;
      return Name == "kCUDA" ? DeviceLiteralKind::CUDA : DeviceLiteralKind::CPU;
    }
    return DeviceLiteralKind::None;
  }
  if (const auto *SL = dyn_cast<StringLiteral>(X)) {
    if (!SL->isOrdinary())
      return DeviceLiteralKind::None;
    llvm::StringRef S = SL->getString();
    if (S == "cpu")
      return DeviceLiteralKind::CPU;
    if (!S.consume_front("cuda"))
      return DeviceLiteralKind::None;
    if (S.empty())
      return DeviceLiteralKind::CUDA;
    if (!S.consume_front(":") || S.empty())
      return DeviceLiteralKind::None;
    for (char C : S)
      if (C < '0' || C > '9')
        return DeviceLiteralKind::None;
    return DeviceLiteralKind::CUDA;
  }
  return DeviceLiteralKind::None;
}

DeviceLiteralUse classifyDeviceLiteralUse(const Expr &Literal,
                                          const ParentMap &PM,
                                          const CudaGuardOptions &Opts) {
  // The Device / TensorOptions the literal has been converted to so far.
  const CXXRecordDecl *Built = nullptr;
  const auto Result = [&] {
    return Built ? DeviceLiteralUse::Selection : DeviceLiteralUse::Other;
  };
  const Stmt *Child = &Literal;
  for (unsigned Depth = 0; Depth < 32; ++Depth) {
    const auto *Parent = dyn_cast_or_null<Expr>(PM.getParent(Child));
    if (!Parent)
      return Result(); // a return, a variable's initialiser, the top, ...
    if (isa<ImplicitCastExpr, ParenExpr, MaterializeTemporaryExpr,
            CXXBindTemporaryExpr, FullExpr>(Parent)) {
      Child = Parent;
      continue;
    }
    if (const auto *Cast = dyn_cast<ExplicitCastExpr>(Parent)) {
      QualType T = Cast->getType();
      if (!Built && !isDeviceTypeEnum(T) && !isDeviceCarrier(recordOf(T)) &&
          !isStdStringRecord(recordOf(T)))
        return DeviceLiteralUse::Other; // e.g. static_cast<int>(kCUDA)
      Child = Parent;
      continue;
    }
    if (const auto *CO = dyn_cast<ConditionalOperator>(Parent)) {
      if (Child == CO->getCond())
        return DeviceLiteralUse::Other;
      Child = Parent;
      continue;
    }
    if (const auto *CE = dyn_cast<CXXConstructExpr>(Parent)) {
      const CXXRecordDecl *RD = CE->getConstructor()->getParent();
      if (isDeviceCarrier(RD)) {
        if (!Built || !isDeviceRecord(RD))
          Built = RD;
        Child = Parent;
        continue;
      }
      if (!Built && isStdStringRecord(RD)) {
        Child = Parent;
        continue;
      }
      return Result(); // a Device handed to some other class
    }
    if (const auto *Call = dyn_cast<CallExpr>(Parent)) {
      if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Call))
        if (Op->isComparisonOp())
          return DeviceLiteralUse::Other;
      const FunctionDecl *FD = Call->getDirectCallee();
      if (FD && nameIn(*FD, Opts.DeviceSelectorFunctions))
        return DeviceLiteralUse::SelectorArgument;
      if (Built)
        return DeviceLiteralUse::Selection;
      if (FD && isDeviceTakingFunction(*FD) && Child != Call->getCallee())
        return DeviceLiteralUse::Selection;
      return DeviceLiteralUse::Other;
    }
    if (isa<MemberExpr>(Parent)) {
      // A method called on the object: `TensorOptions(kCUDA).dtype(...)`
      // still selects; `Device(kCUDA).str()` does not.
      return isTensorOptionsRecord(Built) ? DeviceLiteralUse::Selection
                                          : DeviceLiteralUse::Other;
    }
    if (const auto *BO = dyn_cast<BinaryOperator>(Parent))
      if (BO->isComparisonOp())
        return DeviceLiteralUse::Other;
    return Result();
  }
  return Result();
}

static bool isTensorMethodCall(const Expr &E, llvm::StringRef Name) {
  const auto *MC = dyn_cast<CXXMemberCallExpr>(&E);
  if (!MC)
    return false;
  const CXXMethodDecl *MD = MC->getMethodDecl();
  return MD && MD->getDeclName().isIdentifier() && MD->getName() == Name &&
         isTensorRecord(MD->getParent());
}

bool isTensorCudaCall(const Expr &E) { return isTensorMethodCall(E, "cuda"); }
bool isTensorCpuCall(const Expr &E) { return isTensorMethodCall(E, "cpu"); }

//===----------------------------------------------------------------------===//
// The model
//===----------------------------------------------------------------------===//

namespace {

using Env = llvm::DenseMap<const VarDecl *, int64_t>;

enum class RootKind { Function, Lambda, FieldInit, GlobalInit };

/// A piece of code that runs from its own entry: a function body, a lambda
/// body, a member's default initialiser or a global's initialiser.
struct RootKey {
  RootKind Kind;
  const Decl *Owner = nullptr; // FunctionDecl, FieldDecl or VarDecl
  const LambdaExpr *Lambda = nullptr;
  Stmt *Body = nullptr;
};

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

/// Calls \p Fn on every statement of \p S, not entering lambda bodies (they
/// are roots of their own).
void forEachStmt(const Stmt *S, const std::function<void(const Stmt &)> &Fn) {
  if (!S)
    return;
  Fn(*S);
  if (const auto *L = dyn_cast<LambdaExpr>(S)) {
    for (const Expr *Init : L->capture_inits())
      forEachStmt(Init, Fn);
    return;
  }
  for (const Stmt *Child : S->children())
    forEachStmt(Child, Fn);
}

/// A reference (or construction) and the code that contains it.
struct Site {
  const Expr *E;
  RootKey Root;
};

/// What one walk over the user code of the TU finds.
struct TUIndex {
  /// References to functions, variables and fields; constructions through a
  /// constructor.
  llvm::DenseMap<const Decl *, llvm::SmallVector<Site, 4>> Refs;
  /// Where each class is constructed (directly, through make_shared /
  /// make_unique, or through a TORCH_MODULE holder).
  llvm::DenseMap<const CXXRecordDecl *, llvm::SmallVector<Site, 4>>
      Constructions;
  /// Written constructor initialisers of each member.
  llvm::DenseMap<const FieldDecl *, llvm::SmallVector<const Expr *, 2>>
      FieldInits;
  /// The code in which each lambda expression appears.
  llvm::DenseMap<const LambdaExpr *, llvm::SmallVector<RootKey, 1>>
      LambdaPositions;
  /// Candidate CUDA selections: CUDA literals and `.cuda()` calls.
  std::vector<Site> Candidates;
};

/// Walks the TU's user code (template instantiations included, system
/// headers skipped) and keeps a stack of the code being walked.
class Collector : public RecursiveASTVisitor<Collector> {
  using Base = RecursiveASTVisitor<Collector>;

public:
  Collector(const SourceManager &SM, TUIndex &Index) : SM(SM), Index(Index) {}
  bool shouldVisitTemplateInstantiations() const { return true; }
  bool shouldVisitImplicitCode() const { return false; }

  bool TraverseDecl(Decl *D) {
    if (!D)
      return true;
    if (!isa<TranslationUnitDecl>(D) && D->getLocation().isValid() &&
        SM.isInSystemHeader(SM.getExpansionLoc(D->getLocation())))
      return true;
    std::optional<RootKey> K;
    if (auto *FD = dyn_cast<FunctionDecl>(D)) {
      if (FD->doesThisDeclarationHaveABody() && FD->getBody())
        K = RootKey{RootKind::Function, FD, nullptr, FD->getBody()};
    } else if (auto *VD = dyn_cast<VarDecl>(D)) {
      if (!isa<ParmVarDecl>(VD) && !VD->isLocalVarDecl() && VD->getInit())
        K = RootKey{RootKind::GlobalInit, VD, nullptr,
                    const_cast<Expr *>(VD->getInit())};
    } else if (auto *FD = dyn_cast<FieldDecl>(D)) {
      if (Expr *Init = FD->getInClassInitializer())
        K = RootKey{RootKind::FieldInit, FD, nullptr, Init};
    }
    if (K)
      Stack.push_back(*K);
    bool Continue = Base::TraverseDecl(D);
    if (K)
      Stack.pop_back();
    return Continue;
  }

  bool TraverseLambdaExpr(LambdaExpr *L) {
    if (!Stack.empty())
      Index.LambdaPositions[L].push_back(Stack.back());
    Stack.push_back(
        RootKey{RootKind::Lambda, L->getCallOperator(), L, L->getBody()});
    bool Continue = Base::TraverseLambdaExpr(L);
    Stack.pop_back();
    return Continue;
  }

  bool VisitDeclRefExpr(DeclRefExpr *E) {
    addRef(E->getDecl(), E);
    if (classifyDeviceLiteral(*E) == DeviceLiteralKind::CUDA)
      addCandidate(E);
    return true;
  }
  bool VisitStringLiteral(StringLiteral *E) {
    if (classifyDeviceLiteral(*E) == DeviceLiteralKind::CUDA)
      addCandidate(E);
    return true;
  }
  bool VisitMemberExpr(MemberExpr *E) {
    addRef(E->getMemberDecl(), E);
    return true;
  }
  bool VisitCXXMemberCallExpr(CXXMemberCallExpr *E) {
    if (isTensorCudaCall(*E))
      addCandidate(E);
    return true;
  }
  bool VisitCXXConstructExpr(CXXConstructExpr *E) {
    const CXXConstructorDecl *Ctor = E->getConstructor();
    addRef(Ctor, E);
    addConstruction(Ctor->getParent(), E);
    return true;
  }
  bool VisitCallExpr(CallExpr *E) {
    // std::make_shared<Net>(...), std::make_unique<Net>(...).
    const FunctionDecl *FD = E->getDirectCallee();
    if (!FD || !FD->getDeclName().isIdentifier())
      return true;
    llvm::StringRef Name = FD->getName();
    if (Name != "make_shared" && Name != "make_unique" &&
        Name != "allocate_shared")
      return true;
    if (const TemplateArgumentList *Args = FD->getTemplateSpecializationArgs())
      if (Args->size() >= 1 && Args->get(0).getKind() == TemplateArgument::Type)
        addConstruction(recordOf(Args->get(0).getAsType()), E);
    return true;
  }
  bool VisitCXXConstructorDecl(CXXConstructorDecl *D) {
    for (const CXXCtorInitializer *Init : D->inits())
      if (Init->isWritten() && Init->getMember() && Init->getInit())
        Index.FieldInits[Init->getMember()].push_back(Init->getInit());
    return true;
  }

private:
  void addRef(const Decl *D, const Expr *E) {
    if (!Stack.empty())
      Index.Refs[D->getCanonicalDecl()].push_back({E, Stack.back()});
  }
  void addCandidate(const Expr *E) {
    if (!Stack.empty())
      Index.Candidates.push_back({E, Stack.back()});
  }
  void addConstruction(const CXXRecordDecl *RD, const Expr *E) {
    if (!RD || Stack.empty())
      return;
    RD = RD->getCanonicalDecl();
    Index.Constructions[RD].push_back({E, Stack.back()});
    // A TORCH_MODULE holder constructs its `Impl` inside the (system) header.
    if (!RD->hasDefinition())
      return;
    for (const CXXBaseSpecifier &Base : RD->getDefinition()->bases()) {
      const auto *Spec = dyn_cast_or_null<ClassTemplateSpecializationDecl>(
          recordOf(Base.getType()));
      if (!Spec || Spec->getQualifiedNameAsString() != "torch::nn::ModuleHolder")
        continue;
      const TemplateArgumentList &Args = Spec->getTemplateArgs();
      if (Args.size() == 1 && Args[0].getKind() == TemplateArgument::Type)
        if (const CXXRecordDecl *Impl = recordOf(Args[0].getAsType()))
          Index.Constructions[Impl->getCanonicalDecl()].push_back(
              {E, Stack.back()});
    }
  }

  const SourceManager &SM;
  TUIndex &Index;
  std::vector<RootKey> Stack;
};

bool isTrackableScalar(const VarDecl &VD) {
  QualType T = VD.getType();
  return !T->isReferenceType() && !T.isVolatileQualified() &&
         T->isIntegralOrEnumerationType() && !VD.isStaticLocal() &&
         !isa<ParmVarDecl>(VD);
}

} // namespace

struct CudaAvailabilityGuard::Impl {
  ASTContext &Ctx;
  CudaGuardOptions Opts;
  std::vector<std::string> GuardNames;
  llvm::DenseMap<const Stmt *, std::unique_ptr<RootInfo>> Roots;
  llvm::DenseMap<const Stmt *, std::unique_ptr<ParentMap>> ParentMaps;
  std::unique_ptr<TUIndex> Index;
  std::vector<RootInfo *> Stack;
  unsigned AssumedDepth = ~0U;
  unsigned Budget = 4000;
  llvm::DenseMap<const Decl *, std::optional<int64_t>> StableValues;
  llvm::DenseSet<const Decl *> StableInProgress;

  Impl(ASTContext &Ctx, CudaGuardOptions O) : Ctx(Ctx), Opts(std::move(O)) {
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

  TUIndex &index() {
    if (!Index) {
      Index = std::make_unique<TUIndex>();
      Collector(Ctx.getSourceManager(), *Index)
          .TraverseDecl(Ctx.getTranslationUnitDecl());
    }
    return *Index;
  }

  llvm::ArrayRef<Site> refsTo(const Decl *D) {
    auto It = index().Refs.find(D->getCanonicalDecl());
    if (It == index().Refs.end())
      return {};
    return It->second;
  }

  /// The parent map of a root's code (for a constructor, its initialisers
  /// too).
  ParentMap &parentMap(const RootKey &K) {
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

  /// A read of a scalar: the reference is only converted to an rvalue.
  /// References in template patterns are ignored (their instantiations are
  /// seen).
  bool isPlainRead(const Site &Ref) {
    if (isDependent(Ref.Root))
      return true;
    const Stmt *P = parentMap(Ref.Root).getParentIgnoreParens(Ref.E);
    const auto *Cast = dyn_cast_or_null<ImplicitCastExpr>(P);
    return Cast && Cast->getCastKind() == CK_LValueToRValue;
  }

  //===--- Roots -------------------------------------------------------===//

  static bool isDependent(const RootKey &K) {
    if (const auto *DC = dyn_cast<DeclContext>(K.Owner))
      return DC->isDependentContext();
    return K.Owner->getDeclContext()->isDependentContext();
  }

  RootInfo &root(const RootKey &K) {
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

  void build(RootInfo &R) {
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

  template <typename Fn> void forEachRootStmt(RootInfo &R, Fn F) {
    forEachStmt(R.Key.Body, F);
    if (const auto *Ctor = dyn_cast<CXXConstructorDecl>(R.Key.Owner))
      if (R.Key.Kind == RootKind::Function)
        for (const CXXCtorInitializer *Init : Ctor->inits())
          if (Init->isWritten())
            forEachStmt(Init->getInit(), F);
  }

  /// Scalar locals declared in the root whose every use is a read, a plain
  /// assignment, or an increment: their values can be followed.
  void collectTracked(RootInfo &R) {
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

  const VarDecl *trackedLHS(RootInfo &R, const Expr *E) {
    const auto *DRE = dyn_cast<DeclRefExpr>(E->IgnoreParens());
    const auto *VD = DRE ? dyn_cast<VarDecl>(DRE->getDecl()) : nullptr;
    return VD && R.Tracked.count(VD) ? VD : nullptr;
  }

  void transfer(RootInfo &R, const Stmt &S, Env &E) {
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

  /// The forward worklist walk of the world without CUDA.
  void runWithoutCuda(RootInfo &R) {
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

  //===--- Values without CUDA -------------------------------------------===//

  bool isGuardFunction(const FunctionDecl &FD) {
    return nameIn(FD, GuardNames);
  }

  /// `X == kCUDA` / `X != kCUDA` (DeviceType or Device): X is never CUDA
  /// when CUDA is not available, unless X itself is a CUDA literal.
  std::optional<int64_t> compareWithCuda(const Expr *L, const Expr *R,
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

  std::optional<int64_t> compare(BinaryOperatorKind Op, int64_t L, int64_t R,
                                 bool Unsigned) {
    auto Cmp = [&](auto A, auto B) -> int64_t {
      switch (Op) {
      case BO_EQ: return A == B;
      case BO_NE: return A != B;
      case BO_LT: return A < B;
      case BO_GT: return A > B;
      case BO_LE: return A <= B;
      case BO_GE: return A >= B;
      default: return 0;
      }
    };
    if (Unsigned)
      return Cmp(static_cast<uint64_t>(L), static_cast<uint64_t>(R));
    return Cmp(L, R);
  }

  std::optional<int64_t> eval(const Expr *E, const Env *Vars, RootInfo *R,
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
          C->getCastKind() == CK_LValueToRValue ||
          C->getCastKind() == CK_NoOp)
        return eval(C->getSubExpr(), Vars, R, D);
      return std::nullopt;
    }
    if (const auto *U = dyn_cast<UnaryOperator>(E)) {
      std::optional<int64_t> V = eval(U->getSubExpr(), Vars, R, D);
      if (!V)
        return std::nullopt;
      switch (U->getOpcode()) {
      case UO_LNot: return *V == 0;
      case UO_Minus: return -*V;
      case UO_Plus: return *V;
      default: return std::nullopt;
      }
    }
    if (const auto *BO = dyn_cast<BinaryOperator>(E))
      return evalBinary(BO->getOpcode(), BO->getLHS(), BO->getRHS(), Vars, R,
                        D);
    if (const auto *CO = dyn_cast<ConditionalOperator>(E)) {
      std::optional<int64_t> C = eval(CO->getCond(), Vars, R, D);
      if (C)
        return eval(*C ? CO->getTrueExpr() : CO->getFalseExpr(), Vars, R, D);
      std::optional<int64_t> T = eval(CO->getTrueExpr(), Vars, R, D);
      std::optional<int64_t> F = eval(CO->getFalseExpr(), Vars, R, D);
      return T && F && *T == *F ? T : std::nullopt;
    }
    if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E)) {
      if (Op->getNumArgs() == 2 &&
          (Op->getOperator() == OO_EqualEqual ||
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
            (isTensorRecord(MD->getParent()) ||
             isDeviceRecord(MD->getParent()) ||
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

  std::optional<int64_t> evalBinary(BinaryOperatorKind Op, const Expr *LHS,
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
    case BO_Add: return *L + *Rv;
    case BO_Sub: return *L - *Rv;
    case BO_Mul: return *L * *Rv;
    default: return std::nullopt;
    }
  }

  /// The value of a variable that is never written after its initialiser.
  std::optional<int64_t> stableVarValue(const VarDecl &VD, unsigned Depth) {
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
        const auto *FD = dyn_cast_or_null<FunctionDecl>(
            VD.getParentFunctionOrMethod());
        if (FD && FD->getBody()) {
          LimitedParentMapScope LocalParents(*FD, Ctx);
          Stable = !ExprMutationAnalyzer(*FD->getBody(), Ctx).isMutated(&VD);
        }
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

  /// The call whose callee is the reference \p Ref, or null.
  const CallExpr *callOf(const Site &Ref) {
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

  /// The value \p E has at \p Point (a statement of root \p R), following the
  /// tracked locals up to there.
  std::optional<int64_t> evalAt(const Expr &E, RootInfo &R, const Stmt &Point,
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

  /// A scalar parameter that the function never writes, and that every call
  /// in the TU that can run without CUDA passes the same known value:
  /// `void train(bool use_cuda)` called as
  /// `train(torch::cuda::is_available())`.
  std::optional<int64_t> parameterValue(const ParmVarDecl &PVD,
                                        unsigned Depth) {
    const auto *FD = dyn_cast<FunctionDecl>(PVD.getDeclContext());
    if (!FD || !FD->getBody() || FD->isVariadic())
      return std::nullopt;
    if (const auto *MD = dyn_cast<CXXMethodDecl>(FD))
      if (MD->isVirtual() || MD->getParent()->isLambda())
        return std::nullopt;
    {
      LimitedParentMapScope LocalParents(*FD, Ctx);
      if (ExprMutationAnalyzer(*FD->getBody(), Ctx).isMutated(&PVD))
        return std::nullopt;
    }
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

  /// The value of a scalar member that every constructor sets to the same
  /// value and nothing assigns.
  std::optional<int64_t> stableFieldValue(const FieldDecl &FD,
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
        if (Ctor->isImplicit() || Ctor->isDeleted() || Ctor->isCopyOrMoveConstructor())
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

  /// Whether \p E syntactically consults CUDA availability.
  bool mentionsAvailability(const Stmt *S, unsigned Depth = 0) {
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

  //===--- Positions and entries -------------------------------------------===//

  /// True, false, or nullopt when \p S (in root \p K) is not analysable (no
  /// CFG, template pattern).
  std::optional<bool> reachableWithoutCuda(const Stmt &S, const RootKey &K,
                                           RootInfo *&Out) {
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

  /// All of \p Sites (at least one that is analysable) are guarded.
  bool allGuarded(llvm::ArrayRef<Site> Sites, RootInfo &For) {
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

  /// The local variable a lambda is stored in (`auto f = [] {...};`).
  const VarDecl *boundVariable(const LambdaExpr &L, const RootKey &Where) {
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
      if (!P || !isa<ImplicitCastExpr, MaterializeTemporaryExpr,
                     CXXBindTemporaryExpr, FullExpr, CXXConstructExpr,
                     CXXFunctionalCastExpr, ParenExpr>(P))
        return nullptr;
      Child = P;
    }
    return nullptr;
  }

  bool computeEntryGuarded(RootInfo &R) {
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

  /// Whether every way into \p R passes a guard. Recursion through callers is
  /// answered optimistically inside a cycle (greatest fixpoint); results that
  /// relied on such an assumption are not cached.
  bool entryGuarded(RootInfo &R) {
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

  void collectCpuSelections(RootInfo &R) {
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

  /// Blocks reachable from the entry when the edge \p Index of \p Branch is
  /// cut (in the plain CFG).
  llvm::BitVector reachWithoutEdge(const CFG &G, const CFGBlock *Branch,
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

  /// A branch that does not test availability and that leads to \p Use one
  /// way and to a CPU selection the other way.
  const Stmt *findCpuFallback(RootInfo &R, const CFGBlock &Use) {
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

  const Expr *nonDominatingGuard(RootInfo &R) {
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

  //===--- Driver -------------------------------------------------------===//

  std::vector<Finding> findUnguardedSelections() {
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
      Out.push_back(F);
    }
    return Out;
  }
};

CudaAvailabilityGuard::CudaAvailabilityGuard(ASTContext &Ctx,
                                             CudaGuardOptions Opts)
    : P(std::make_unique<Impl>(Ctx, std::move(Opts))) {}

CudaAvailabilityGuard::~CudaAvailabilityGuard() = default;

std::vector<CudaAvailabilityGuard::Finding>
CudaAvailabilityGuard::findUnguardedSelections() {
  return P->findUnguardedSelections();
}

std::optional<int64_t> CudaAvailabilityGuard::valueWithoutCuda(const Expr &E) {
  return P->eval(&E, nullptr, nullptr, 0);
}

} // namespace clang::tidy::torch
