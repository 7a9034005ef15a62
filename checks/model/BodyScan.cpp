//===--- BodyScan.cpp - torch-tidy ----------------------------------------===//
//
// The FlowModel of one function, and what one walk of its body tells it
// before the dataflow runs: the variables whose address escapes, the
// pointers it reseats, the owning pointers another name may reach, the
// receivers of backward(), the pointers to page-locked memory.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "ProgramModel.h"
#include "SharedOwnerScan.h"
#include "Summary.h"
#include "api/Autocast.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "api/Training.h"
#include "support/UserCodeParents.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"

namespace clang::tidy::torch {

namespace {

/// A variable's initialiser without the wrappers around a construction
/// (`Evaluator e(net)`, `Evaluator e = Evaluator(net)`, `Evaluator e{net}`).
const Expr *stripConversionsKeepingConstruct(const VarDecl *VD) {
  const Expr *E = VD->getInit()->IgnoreImplicit();
  while (true) {
    if (const auto *FC = dyn_cast<CXXFunctionalCastExpr>(E))
      E = FC->getSubExpr()->IgnoreImplicit();
    else if (const auto *BTE = dyn_cast<CXXBindTemporaryExpr>(E))
      E = BTE->getSubExpr()->IgnoreImplicit();
    else
      return E;
  }
}

/// A class of the program's own, not a library's.
bool isUserClass(QualType T) {
  const CXXRecordDecl *RD = T->getAsCXXRecordDecl();
  return RD && !RD->isInStdNamespace() && !isTorchNamespaceDecl(*RD) &&
         !isSystemHeaderDecl(*RD, RD->getASTContext().getSourceManager());
}

/// Collects, in one walk of the body, the variables whose address is kept,
/// the variables backward() runs on, and the pointers to pinned memory.
class FunctionScanner : public RecursiveASTVisitor<FunctionScanner> {
public:
  FunctionScanner(llvm::DenseSet<const ValueDecl *> &Escaped,
                  llvm::DenseSet<const ValueDecl *> &Reseated,
                  llvm::DenseSet<const VarDecl *> &ResettingLoopRanges,
                  const TorchApiOptions &Opts)
      : Escaped(Escaped), Reseated(Reseated),
        ResettingLoopRanges(ResettingLoopRanges), Opts(Opts) {}

  bool shouldVisitLambdaBody() const { return false; }

  /// `v.backward()`, `v.mean().backward()`, `(v / k).backward()`.
  bool VisitCXXMemberCallExpr(CXXMemberCallExpr *Call) {
    const CXXMethodDecl *MD = Call->getMethodDecl();
    if (!MD || !MD->getIdentifier() || MD->getName() != "backward" ||
        !isTensorType(MD->getThisType()->getPointeeType()))
      return true;
    if (const auto *Ref = dyn_cast_or_null<DeclRefExpr>(
            backwardSource(Call->getImplicitObjectArgument())))
      Backward.try_emplace(Ref->getDecl(), Call);
    return true;
  }

  bool VisitCallExpr(CallExpr *Call) {
    // `owner.reset()`: the owned object is gone (its construction no longer
    // names what a later destructor sees).
    if (const auto *Member = dyn_cast<CXXMemberCallExpr>(Call))
      if (const auto *Ref = dyn_cast_or_null<DeclRefExpr>(
              Member->getImplicitObjectArgument()->IgnoreParenImpCasts());
          Ref && isOwningPointer(Ref->getType()) && Member->getMethodDecl() &&
          Member->getMethodDecl()->getIdentifier() &&
          llvm::is_contained({"reset", "release", "swap"},
                             Member->getMethodDecl()->getName()))
        ++Writes[Ref->getDecl()];
    // `cudaHostAlloc(&ptr, ...)`: `ptr` points to page-locked memory.
    if (const FunctionDecl *FD = Call->getDirectCallee();
        FD && FD->getIdentifier() && Call->getNumArgs() > 0) {
      llvm::StringRef N = FD->getName();
      if (N == "cudaHostAlloc" || N == "cudaMallocHost" ||
          N == "cuMemAllocHost" || N == "cuMemHostAlloc")
        if (const auto *UO = dyn_cast<UnaryOperator>(
                Call->getArg(0)->IgnoreParenCasts());
            UO && UO->getOpcode() == UO_AddrOf)
          if (const auto *Ref =
                  dyn_cast<DeclRefExpr>(UO->getSubExpr()->IgnoreParenCasts()))
            PinnedPointers.insert(Ref->getDecl());
    }
    // An address passed straight to a call is no escape: the call is seen
    // (its summary, or an opaque call that forgets the variable).
    // A pointer handed to the program's own function names the object for
    // that call; a library function (a container's push_back) may keep it.
    const FunctionDecl *Callee = Call->getDirectCallee();
    bool ProgramCallee =
        Callee && !Callee->getASTContext().getSourceManager().isInSystemHeader(
                      Callee->getLocation());
    for (const Expr *Arg : Call->arguments()) {
      if (const auto *UO = dyn_cast<UnaryOperator>(Arg->IgnoreParenImpCasts());
          UO && UO->getOpcode() == UO_AddrOf)
        PassedAddresses.insert(UO);
      if (ProgramCallee)
        notePointerDeref(Arg);
    }
    return true;
  }

  /// A copy of an object, or a move from it (`auto b = a;`,
  /// `v.push_back(std::move(a))`, a by-value capture or argument).
  bool VisitCXXConstructExpr(CXXConstructExpr *Construct) {
    if (!Construct->getConstructor()->isCopyOrMoveConstructor() ||
        Construct->getNumArgs() < 1)
      return true;
    const Expr *Source = Construct->getArg(0);
    if (const Expr *Moved = movedOrForwarded(Source))
      Source = Moved;
    if (const auto *Ref = dyn_cast<DeclRefExpr>(Source->IgnoreParenImpCasts()))
      Copied.insert(Ref->getDecl());
    return true;
  }

  bool VisitCXXOperatorCallExpr(CXXOperatorCallExpr *Op) {
    if (Op->isAssignmentOp() && Op->getNumArgs() == 2)
      if (const auto *Ref = dyn_cast<DeclRefExpr>(
              Op->getArg(0)->IgnoreParenImpCasts()))
        ++Writes[Ref->getDecl()];
    return true;
  }

  /// `T *p = &x;`: p names x while it is used only through `*p`, `p->` and
  /// as an argument of the program's own functions (decided in
  /// addAliasEscapes()).
  bool VisitVarDecl(VarDecl *VD) {
    if (!VD->hasLocalStorage() || !VD->getInit())
      return true;
    // `Evaluator eval(net);`: an object that may bind members to `net`.
    if (const auto *Construct =
            dyn_cast<CXXConstructExpr>(stripConversionsKeepingConstruct(VD));
        Construct && !isa<ParmVarDecl>(VD) &&
        !VD->getType()->isReferenceType() && isUserClass(VD->getType()) &&
        !Construct->getConstructor()->isCopyOrMoveConstructor() &&
        Construct->getConstructor()->isUserProvided())
      Constructed.push_back({VD, Construct});
    // `auto s = std::make_unique<Server>(net);`: the object it owns.
    if (const auto *Make =
            dyn_cast<CallExpr>(stripConversionsKeepingConstruct(VD));
        Make && !isa<ParmVarDecl>(VD) && !VD->getType()->isReferenceType() &&
        isOwningPointer(VD->getType()) &&
        isOwnerFactory(Make->getDirectCallee()) &&
        isUserClass(ownedType(VD->getType())))
      Constructed.push_back({VD, Make});
    // `Net copy = model;`, `Net copy = trainer.model();` (a getter of a
    // member), `auto net = std::dynamic_pointer_cast<Net>(exp.model);`: a
    // second handle of the same module.
    if (isSharedModuleHandleType(VD->getType()) &&
        !VD->getType()->isReferenceType()) {
      const Expr *Source = nullptr;
      if (const auto *Copy = dyn_cast<CXXConstructExpr>(
              VD->getInit()->IgnoreImplicit());
          Copy && Copy->getConstructor()->isCopyConstructor())
        Source = Copy->getArg(0);
      else
        Source = smartPointerCastSource(VD->getInit());
      if (Source) {
        Source = Source->IgnoreParenImpCasts();
        const auto *Ref = dyn_cast<DeclRefExpr>(Source);
        if (isSharedModuleHandleType(Source->getType()) &&
            (Ref ? isa<VarDecl>(Ref->getDecl())
                 : isa<MemberExpr, CXXMemberCallExpr>(Source)))
          HandleCopies.push_back({VD, Source});
      }
    }
    if (!VD->getType()->isPointerType())
      return true;
    if (const auto *UO =
            dyn_cast<UnaryOperator>(VD->getInit()->IgnoreParenImpCasts());
        UO && UO->getOpcode() == UO_AddrOf)
      if (const auto *Ref =
              dyn_cast<DeclRefExpr>(UO->getSubExpr()->IgnoreParenImpCasts())) {
        AliasInits.insert(UO);
        Aliases.push_back({Ref->getDecl(), VD});
      }
    return true;
  }

  bool VisitDeclRefExpr(DeclRefExpr *Ref) {
    if (Ref->getType()->isPointerType())
      ++PointerUses[Ref->getDecl()];
    return true;
  }

  bool VisitMemberExpr(MemberExpr *Member) {
    if (Member->isArrow())
      notePointerDeref(Member->getBase());
    return true;
  }

  bool VisitLambdaExpr(LambdaExpr *Lambda) {
    for (const LambdaCapture &C : Lambda->captures())
      if (C.capturesVariable()) {
        CapturedPointers.insert(C.getCapturedVar());
        if (C.getCaptureKind() == LCK_ByRef)
          CapturedByReference.insert(C.getCapturedVar());
      }
    return true;
  }

  llvm::DenseSet<const ValueDecl *> CapturedByReference;

  bool VisitCXXForRangeStmt(CXXForRangeStmt *Loop) {
    // Whether the body resets gradients, and whether it calls the element
    // (`hook()`, `kv.second()`, `for (auto &[name, hook] : hooks) hook()`).
    struct FindCalls : RecursiveASTVisitor<FindCalls> {
      const TorchApiOptions *Opts = nullptr;
      const VarDecl *Element = nullptr;
      bool Resets = false, CallsElement = false;
      bool VisitCallExpr(CallExpr *C) {
        Resets |= isGradientReset(*C, *Opts);
        if (const Expr *Holder = callableHolder(*C))
          CallsElement |= rangeElementNamed(*Holder) == Element;
        return true;
      }
    } Finder;
    Finder.Opts = &Opts;
    Finder.Element = Loop->getLoopVariable();
    Finder.TraverseStmt(Loop->getBody());
    const auto *Range =
        Loop->getRangeStmt()
            ? dyn_cast_or_null<VarDecl>(Loop->getRangeStmt()->getSingleDecl())
            : nullptr;
    if (Range && Finder.Resets)
      ResettingLoopRanges.insert(Range);
    if (Range && Finder.CallsElement)
      CallingLoopRanges.insert(Range);
    if (Range && visitsEachElementUnwritten(*Loop))
      ElementwiseLoopRanges.insert(Range);
    return true;
  }

  /// Whether a range-for's body reaches the container it walks only through
  /// its loop variable: a local container the body does not name, or a
  /// member of `*this` in a body that does not use `this`.
  static bool visitsEachElementUnwritten(const CXXForRangeStmt &Loop) {
    const Expr *Init = Loop.getRangeInit();
    if (!Init)
      return false;
    Init = Init->IgnoreParenImpCasts();
    const ValueDecl *Named = nullptr;
    bool OnThis = false;
    if (const auto *Ref = dyn_cast<DeclRefExpr>(Init)) {
      const auto *Var = dyn_cast<VarDecl>(Ref->getDecl());
      if (!Var || !Var->hasLocalStorage() || Var->getType()->isReferenceType())
        return false;
      Named = Var;
    } else if (const auto *Member = dyn_cast<MemberExpr>(Init);
               Member && isa<CXXThisExpr>(Member->getBase()->IgnoreImpCasts())) {
      Named = Member->getMemberDecl();
      OnThis = true;
    } else {
      return false;
    }
    struct Finder : RecursiveASTVisitor<Finder> {
      const ValueDecl *Named = nullptr;
      bool OnThis = false, Found = false;
      bool VisitDeclRefExpr(DeclRefExpr *Ref) {
        Found |= Ref->getDecl() == Named;
        return !Found;
      }
      bool VisitCXXThisExpr(CXXThisExpr *) {
        Found |= OnThis;
        return !Found;
      }
      bool VisitLambdaExpr(LambdaExpr *L) {
        // A capture by reference of the whole object or of the container.
        for (const LambdaCapture &C : L->captures())
          Found |= (C.capturesThis() && OnThis) ||
                   (C.capturesVariable() && C.getCapturedVar() == Named);
        return !Found;
      }
    } F;
    F.Named = Named;
    F.OnThis = OnThis;
    F.TraverseStmt(const_cast<Stmt *>(Loop.getBody()));
    return !F.Found;
  }

  llvm::DenseSet<const VarDecl *> CallingLoopRanges;
  llvm::DenseSet<const VarDecl *> ElementwiseLoopRanges;

  /// The handle copies that name their source's module for the whole body:
  /// neither is ever assigned.
  void addHandleAliases(
      llvm::DenseMap<const ValueDecl *, const Expr *> &Out) const {
    for (const auto &[Copy, Source] : HandleCopies) {
      const auto *Ref = dyn_cast<DeclRefExpr>(Source);
      if (!Writes.lookup(Copy) && !(Ref && Writes.lookup(Ref->getDecl())))
        Out.try_emplace(Copy, Source);
    }
  }

  /// The objects whose members name what their construction passed.
  void addObjectConstructions(
      llvm::DenseMap<const VarDecl *, const Expr *> &Out) const {
    for (const auto &[Object, Construct] : Constructed)
      if (!Writes.lookup(Object) && !Copied.contains(Object) &&
          !Escaped.contains(Object))
        Out.try_emplace(Object, Construct);
  }

  /// The variables whose address was taken for a pointer that does more
  /// than name them.
  void addAliasEscapes() {
    for (const auto &[Object, Pointer] : Aliases)
      if (Reseated.contains(Pointer) || Escaped.contains(Pointer) ||
          CapturedPointers.contains(Pointer) ||
          PointerUses.lookup(Pointer) != PointerDerefs.lookup(Pointer))
        Escaped.insert(Object);
  }

  bool VisitUnaryOperator(UnaryOperator *UO) {
    if (UO->getOpcode() == UO_Deref)
      notePointerDeref(UO->getSubExpr());
    if (UO->getOpcode() == UO_AddrOf && !PassedAddresses.contains(UO) &&
        !AliasInits.contains(UO)) {
      const Expr *Sub = UO->getSubExpr()->IgnoreParenImpCasts();
      if (const auto *Ref = dyn_cast<DeclRefExpr>(Sub))
        Escaped.insert(Ref->getDecl());
      // `&member_` kept where the analysis cannot follow (a braced list
      // of addresses walked by a loop): what it points to may change.
      if (const auto *Member = dyn_cast<MemberExpr>(Sub);
          Member && isa<CXXThisExpr>(Member->getBase()->IgnoreParenImpCasts()))
        MemberAddresses.insert(UO);
    }
    if (UO->isIncrementDecrementOp())
      notePointerWrite(UO->getSubExpr());
    return true;
  }

  bool VisitBinaryOperator(BinaryOperator *BO) {
    if (BO->isAssignmentOp())
      notePointerWrite(BO->getLHS());
    return true;
  }

  /// The variables on which backward() runs, written at most once.
  llvm::DenseMap<const ValueDecl *, const CallExpr *> backwardReceivers() const {
    llvm::DenseMap<const ValueDecl *, const CallExpr *> Out;
    for (const auto &[V, Call] : Backward) {
      unsigned W = Writes.lookup(V);
      const auto *VD = dyn_cast<VarDecl>(V);
      if (!VD || Escaped.contains(V) || VD->getType()->isReferenceType())
        continue;
      // A parameter is written by its caller; a local by its initialiser.
      if ((isa<ParmVarDecl>(VD) && W == 0) ||
          (!isa<ParmVarDecl>(VD) && W == 0 && VD->hasInit()))
        Out.try_emplace(V, Call);
    }
    return Out;
  }

  llvm::DenseSet<const ValueDecl *> PinnedPointers;
  llvm::DenseSet<const UnaryOperator *> MemberAddresses;

private:
  void notePointerDeref(const Expr *Pointer) {
    if (const auto *Ref = dyn_cast<DeclRefExpr>(Pointer->IgnoreParenImpCasts());
        Ref && Ref->getType()->isPointerType())
      ++PointerDerefs[Ref->getDecl()];
  }

  void notePointerWrite(const Expr *Target) {
    if (const auto *Ref = dyn_cast<DeclRefExpr>(Target->IgnoreParenImpCasts());
        Ref && Ref->getType()->isPointerType())
      Reseated.insert(Ref->getDecl());
  }

  llvm::DenseSet<const ValueDecl *> &Escaped;
  llvm::DenseSet<const ValueDecl *> &Reseated;
  llvm::DenseSet<const VarDecl *> &ResettingLoopRanges;
  const TorchApiOptions &Opts;
  llvm::DenseMap<const ValueDecl *, const CallExpr *> Backward;
  llvm::DenseMap<const ValueDecl *, unsigned> Writes;
  llvm::SmallVector<std::pair<const VarDecl *, const Expr *>, 2> Constructed;
  llvm::DenseSet<const ValueDecl *> Copied;
  llvm::DenseSet<const UnaryOperator *> PassedAddresses;
  llvm::DenseSet<const UnaryOperator *> AliasInits;
  llvm::SmallVector<std::pair<const ValueDecl *, const ValueDecl *>, 2> Aliases;
  llvm::DenseMap<const ValueDecl *, unsigned> PointerUses, PointerDerefs;
  llvm::DenseSet<const ValueDecl *> CapturedPointers;
  llvm::SmallVector<std::pair<const ValueDecl *, const Expr *>, 1>
      HandleCopies;
};


/// Where the function leaves an autocast region: whether it switches
/// autocast off or back to a saved state anywhere (it means to close the
/// regions it opens), and the throws its own try blocks catch.
class RegionScan : public RecursiveASTVisitor<RegionScan> {
public:
  bool shouldVisitLambdaBody() const { return false; }

  bool VisitCallExpr(CallExpr *Call) {
    AutocastSwitch Switch = autocastSwitch(*Call);
    if (Switch.What != AutocastSwitch::Enable)
      return true;
    const auto *Literal =
        dyn_cast<CXXBoolLiteralExpr>(Switch.Value->IgnoreParenImpCasts());
    Closes |= !Literal || !Literal->getValue();
    return true;
  }

  bool VisitCXXTryStmt(CXXTryStmt *Try) {
    struct Throws : RecursiveASTVisitor<Throws> {
      llvm::DenseSet<const Stmt *> *Into = nullptr;
      bool shouldVisitLambdaBody() const { return false; }
      bool VisitCXXThrowExpr(CXXThrowExpr *T) {
        Into->insert(T);
        return true;
      }
      bool VisitCallExpr(CallExpr *C) {
        Into->insert(C);
        return true;
      }
    } Finder;
    Finder.Into = &Caught;
    Finder.TraverseStmt(Try->getTryBlock());
    return true;
  }

  bool Closes = false;
  llvm::DenseSet<const Stmt *> Caught;
};

} // namespace

FlowModel::FlowModel(const Decl *Owner, ASTContext &Ctx, ProgramModel &Program)
    : Owner(Owner), Function(dyn_cast_or_null<FunctionDecl>(Owner)), Ctx(Ctx),
      Program(Program) {
  FunctionScanner Scanner(Escaped, ReseatedPointers, ResettingLoopRanges,
                          Program.options());
  SharedOwnerScan Owners;
  RegionScan Regions;
  if (const Stmt *Body = Function ? Function->getBody() : nullptr) {
    Scanner.TraverseStmt(const_cast<Stmt *>(Body));
    Owners.TraverseStmt(const_cast<Stmt *>(Body));
    Regions.TraverseStmt(const_cast<Stmt *>(Body));
  }
  ClosesAutocast = Regions.Closes;
  CaughtThrows = std::move(Regions.Caught);
  if (const auto *Ctor = dyn_cast_or_null<CXXConstructorDecl>(Function))
    for (const CXXCtorInitializer *Init : Ctor->inits())
      if (Init->getInit()) {
        Scanner.TraverseStmt(Init->getInit());
        Owners.TraverseStmt(Init->getInit());
      }
  Owners.addShared(Escaped);
  Scanner.addAliasEscapes();
  Scanner.addHandleAliases(HandleAliases);
  Scanner.addObjectConstructions(ObjectConstructions);
  BackwardReceivers = Scanner.backwardReceivers();
  PinnedHostPointers = std::move(Scanner.PinnedPointers);
  CapturedByReference = std::move(Scanner.CapturedByReference);
  CallingLoopRanges = std::move(Scanner.CallingLoopRanges);
  ElementwiseLoopRanges = std::move(Scanner.ElementwiseLoopRanges);
  EscapingMemberAddresses = std::move(Scanner.MemberAddresses);
}

const TorchApiOptions &FlowModel::options() const { return Program.options(); }

bool FlowModel::leavesFunction(const Stmt &S) const {
  if (isa<ReturnStmt>(S))
    return true;
  if (CaughtThrows.contains(&S))
    return false;
  if (isa<CXXThrowExpr>(S))
    return true;
  // A call, or a construction (`Batch b(raw);` whose constructor throws).
  const FunctionSummary *Summary =
      isa<CallExpr, CXXConstructExpr>(S)
          ? Program.summaryForCall(cast<Expr>(S))
          : nullptr;
  return Summary && Summary->MayThrow;
}

bool FlowModel::isInBody(const Stmt *S) const {
  const Stmt *Body = Function ? Function->getBody() : nullptr;
  if (!S || !Body)
    return false;
  const SourceManager &SM = Ctx.getSourceManager();
  return SM.isPointWithin(SM.getExpansionLoc(S->getBeginLoc()),
                          SM.getExpansionLoc(Body->getBeginLoc()),
                          SM.getExpansionLoc(Body->getEndLoc()));
}

} // namespace clang::tidy::torch
