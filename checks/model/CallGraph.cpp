//===--- CallGraph.cpp - torch-tidy ---------------------------------------===//
//
// The program model's call graph of the TU's user code: call sites (direct,
// through callables, and where lambdas are created), functions whose address
// is taken, recursion, and whether the program defines `main`.
//
//===----------------------------------------------------------------------===//

#include "ProgramModel.h"
#include "FlowAnalysis.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "support/UserCodeParents.h"
#include "support/UserCodeTraversal.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "llvm/ADT/SCCIterator.h"

namespace clang::tidy::torch {

//===--- Call graph -------------------------------------------------------===//

namespace {

/// The expression that names the function a thread start runs (`f`, `&f`,
/// `&C::m`): the reference that is no escape of its address.
const DeclRefExpr *threadEntryReference(const Expr &Start) {
  llvm::ArrayRef<const Expr *> Args = threadStartArguments(Start);
  if (Args.empty())
    return nullptr;
  const Expr *E = stripConversions(Args.front())->IgnoreImplicit();
  if (const auto *AddressOf = dyn_cast<UnaryOperator>(E);
      AddressOf && AddressOf->getOpcode() == UO_AddrOf)
    E = AddressOf->getSubExpr()->IgnoreParenImpCasts();
  const auto *Ref = dyn_cast<DeclRefExpr>(E);
  return Ref && isa<FunctionDecl>(Ref->getDecl()) ? Ref : nullptr;
}

/// The function a thread start runs, when its argument names one: a
/// function, a member function, a lambda, a local variable initialised
/// with a lambda.
const FunctionDecl *threadEntryFunction(const Expr &Start) {
  if (const DeclRefExpr *Ref = threadEntryReference(Start))
    return cast<FunctionDecl>(Ref->getDecl());
  llvm::ArrayRef<const Expr *> Args = threadStartArguments(Start);
  if (Args.empty())
    return nullptr;
  const Expr *E = stripConversions(Args.front())->IgnoreImplicit();
  if (const auto *Ref = dyn_cast<DeclRefExpr>(E->IgnoreParenImpCasts()))
    if (const auto *Var = dyn_cast<VarDecl>(Ref->getDecl());
        Var && Var->hasLocalStorage() && !isa<ParmVarDecl>(Var) &&
        Var->getInit())
      E = stripConversions(Var->getInit())->IgnoreImplicit();
  if (const auto *Lambda = dyn_cast<LambdaExpr>(E))
    return Lambda->getCallOperator();
  return nullptr;
}

/// References to functions other than as the callee of a call, in the user
/// code (template patterns left out: their instantiations are walked).
class ReferenceCounter : public RecursiveASTVisitor<ReferenceCounter> {
public:
  explicit ReferenceCounter(llvm::DenseMap<const FunctionDecl *, unsigned> &Out)
      : Out(Out) {}
  bool shouldVisitTemplateInstantiations() const { return true; }
  bool shouldVisitLambdaBody() const { return true; }

  bool TraverseDecl(Decl *D) {
    if (const auto *FD = dyn_cast_or_null<FunctionDecl>(D))
      if (FD->isDependentContext())
        return true;
    if (const auto *RD = dyn_cast_or_null<CXXRecordDecl>(D))
      if (RD->isDependentContext())
        return true;
    return RecursiveASTVisitor::TraverseDecl(D);
  }
  bool TraverseCallExpr(CallExpr *Call) { return traverseCall(Call); }
  bool TraverseCXXMemberCallExpr(CXXMemberCallExpr *Call) {
    return traverseCall(Call);
  }
  bool TraverseCXXOperatorCallExpr(CXXOperatorCallExpr *Call) {
    return traverseCall(Call);
  }
  bool TraverseCXXConstructExpr(CXXConstructExpr *Construct) {
    if (const DeclRefExpr *Entry = threadEntryReference(*Construct))
      ThreadEntries.insert(Entry);
    return RecursiveASTVisitor::TraverseCXXConstructExpr(Construct);
  }
  bool VisitDeclRefExpr(DeclRefExpr *Ref) {
    // The function a thread runs: its calls are the thread's start.
    if (!ThreadEntries.contains(Ref))
      count(Ref->getDecl());
    return true;
  }
  bool VisitMemberExpr(MemberExpr *ME) {
    count(ME->getMemberDecl());
    return true;
  }

private:
  /// The callee of a call is no escape; its arguments may be.
  bool traverseCall(CallExpr *Call) {
    if (const DeclRefExpr *Entry = threadEntryReference(*Call))
      ThreadEntries.insert(Entry);
    for (Stmt *Arg : Call->arguments())
      if (!TraverseStmt(Arg))
        return false;
    if (isa<CXXOperatorCallExpr>(Call) && Call->getNumArgs() > 0)
      return true;
    if (const auto *ME = dyn_cast<MemberExpr>(Call->getCallee()->IgnoreParens()))
      return TraverseStmt(ME->getBase());
    const Expr *Callee = Call->getCallee()->IgnoreParenImpCasts();
    if (isa<DeclRefExpr>(Callee))
      return true;
    return TraverseStmt(Call->getCallee());
  }
  void count(const ValueDecl *D) {
    if (const auto *FD = dyn_cast_or_null<FunctionDecl>(D))
      ++Out[FD->getCanonicalDecl()];
  }
  llvm::DenseMap<const FunctionDecl *, unsigned> &Out;
  llvm::DenseSet<const DeclRefExpr *> ThreadEntries;
};

/// Every call and construction in the user code, with the function that
/// runs: constructions through std::make_shared<T>, std::make_unique<T> and
/// module holders count as calls of T's constructor, and a lambda handed to
/// a library function (std::for_each, std::thread) counts as called there.
class SiteCollector : public RecursiveASTVisitor<SiteCollector> {
public:
  SiteCollector(
      llvm::DenseMap<const FunctionDecl *, llvm::SmallVector<CallSite, 2>> &Out,
      llvm::DenseMap<const FunctionDecl *, llvm::SmallVector<CallSite, 1>>
          &Creations,
      std::vector<CallSite> &CallableCalls,
      llvm::DenseMap<const FunctionDecl *,
                     llvm::SmallVector<const FunctionDecl *, 2>> &Overriders,
      ProgramModel &Program)
      : Out(Out), Creations(Creations), CallableCalls(CallableCalls),
        Overriders(Overriders), Program(Program) {}
  bool shouldVisitTemplateInstantiations() const { return true; }
  bool shouldVisitImplicitCode() const { return true; }

  bool TraverseDecl(Decl *D) {
    if (!D)
      return true;
    if (const auto *FD = dyn_cast<FunctionDecl>(D)) {
      if (FD->isDependentContext() && !isa<CXXMethodDecl>(FD) &&
          FD->getDescribedFunctionTemplate() &&
          !FD->getDescribedFunctionTemplate()->specializations().empty())
        return true;
      const FunctionDecl *Saved = Caller;
      Caller = FD->doesThisDeclarationHaveABody() ? FD : Caller;
      if (const auto *Method = dyn_cast<CXXMethodDecl>(FD);
          Method && Method->doesThisDeclarationHaveABody())
        addOverrider(*Method, *Method);
      bool R = RecursiveASTVisitor::TraverseDecl(D);
      Caller = Saved;
      return R;
    }
    if (const auto *RD = dyn_cast<CXXRecordDecl>(D);
        RD && RD->isDependentContext() && !RD->isLambda())
      return true;
    return RecursiveASTVisitor::TraverseDecl(D);
  }
  bool TraverseLambdaExpr(LambdaExpr *L) {
    // The lambda's body belongs to its call operator.
    for (Expr *Init : L->capture_inits())
      if (Init && !TraverseStmt(Init))
        return false;
    if (Caller && L->getCallOperator())
      Creations[L->getCallOperator()->getCanonicalDecl()].push_back({L, Caller});
    const FunctionDecl *Saved = Caller;
    Caller = L->getCallOperator();
    TraverseStmt(L->getBody());
    Caller = Saved;
    return true;
  }
  bool VisitCallExpr(CallExpr *Call) {
    if (Caller && callableHolder(*Call))
      CallableCalls.push_back({Call, Caller});
    const FunctionDecl *FD = Call->getDirectCallee();
    if (!FD)
      return true;
    if (isOwnerFactory(FD)) {
      if (const CXXRecordDecl *RD = Call->getType()->getAsCXXRecordDecl())
        if (const auto *Spec = dyn_cast<ClassTemplateSpecializationDecl>(RD);
            Spec && Spec->getTemplateArgs().size() >= 1 &&
            Spec->getTemplateArgs()[0].getKind() == TemplateArgument::Type)
          if (const CXXRecordDecl *Held =
                  Spec->getTemplateArgs()[0].getAsType()->getAsCXXRecordDecl())
            addConstruction(*Held, Call->getNumArgs(), Call);
      return true;
    }
    // `amp.emplace(at::kHalf)` on a std::optional<Guard>: Guard's constructor.
    if (const CXXRecordDecl *Held = optionalEmplacedClass(*Call)) {
      addConstruction(*Held, Call->getNumArgs(), Call);
      return true;
    }
    add(FD, Call);
    if (addThreadStart(*Call))
      return true;
    if (isLibraryFunction(*FD) && !storesCallableArgument(*FD))
      for (const Expr *Arg : Call->arguments())
        if (const auto *Lambda =
                dyn_cast<LambdaExpr>(stripConversions(Arg)->IgnoreImplicit()))
          add(Lambda->getCallOperator(), Call);
    return true;
  }
  /// A local object's destructor runs where its scope ends.
  bool VisitVarDecl(VarDecl *Var) {
    if (!Caller || !Var->hasLocalStorage() || isa<ParmVarDecl>(Var) ||
        !Var->getInit())
      return true;
    const CXXRecordDecl *RD = Var->getType()->getAsCXXRecordDecl();
    const CXXDestructorDecl *Dtor =
        RD && RD->hasDefinition() ? RD->getDestructor() : nullptr;
    if (!Dtor || !Dtor->isUserProvided() || !Dtor->hasBody() ||
        isSystemHeaderDecl(*Dtor, Program.context().getSourceManager()))
      return true;
    Out[Dtor->getCanonicalDecl()].push_back({Var->getInit(), Caller, Var});
    return true;
  }
  bool VisitCXXConstructExpr(CXXConstructExpr *Construct) {
    const CXXConstructorDecl *Ctor = Construct->getConstructor();
    add(constructorThatRuns(Ctor), Construct);
    addThreadStart(*Construct);
    // A TORCH_MODULE holder built from arguments builds its module.
    if (isModuleHandleType(Construct->getType()) &&
        !Ctor->isCopyOrMoveConstructor() && Construct->getNumArgs() > 0 &&
        !Construct->getArg(0)->getType()->isNullPtrType())
      if (const auto *Spec = dyn_cast_or_null<ClassTemplateSpecializationDecl>(
              Ctor->getParent()->getNumBases() == 1
                  ? Ctor->getParent()->bases_begin()->getType()->getAsCXXRecordDecl()
                  : nullptr))
        if (Spec->getTemplateArgs().size() >= 1 &&
            Spec->getTemplateArgs()[0].getKind() == TemplateArgument::Type)
          if (const CXXRecordDecl *Impl =
                  Spec->getTemplateArgs()[0].getAsType()->getAsCXXRecordDecl())
            addConstruction(*Impl, Construct->getNumArgs(), Construct);
    return true;
  }

private:
  /// A thread started here runs its function: a call site of its own kind.
  bool addThreadStart(const Expr &Start) {
    const FunctionDecl *Entry = Caller ? threadEntryFunction(Start) : nullptr;
    if (!Entry)
      return false;
    CallSite Site{&Start, Caller};
    Site.ThreadStart = true;
    Out[Entry->getCanonicalDecl()].push_back(Site);
    return true;
  }
  void add(const FunctionDecl *Callee, const Expr *Call) {
    if (!Callee || !Caller)
      return;
    if (isSystemHeaderDecl(*Callee, Program.context().getSourceManager()) &&
        !isa<CXXConstructorDecl>(Callee))
      return;
    Out[Callee->getCanonicalDecl()].push_back({Call, Caller});
  }
  /// \p Override may run for a call of \p Method or of what it overrides.
  void addOverrider(const CXXMethodDecl &Method, const CXXMethodDecl &Override) {
    for (const CXXMethodDecl *Base : Method.overridden_methods()) {
      auto &List = Overriders[Base->getCanonicalDecl()];
      if (llvm::is_contained(List, &Override))
        continue;
      List.push_back(&Override);
      addOverrider(*Base, Override);
    }
  }
  void addConstruction(const CXXRecordDecl &Class, unsigned Args,
                       const Expr *Call) {
    if (!Class.hasDefinition())
      return;
    const CXXConstructorDecl *Found = nullptr;
    for (const CXXConstructorDecl *Ctor : Class.getDefinition()->ctors()) {
      if (Ctor->isCopyOrMoveConstructor() || Ctor->isDeleted() ||
          Args > Ctor->getNumParams() || Args < Ctor->getMinRequiredArguments())
        continue;
      if (Found)
        return;
      Found = Ctor;
    }
    add(Found, Call);
  }

  llvm::DenseMap<const FunctionDecl *, llvm::SmallVector<CallSite, 2>> &Out;
  llvm::DenseMap<const FunctionDecl *, llvm::SmallVector<CallSite, 1>>
      &Creations;
  std::vector<CallSite> &CallableCalls;
  llvm::DenseMap<const FunctionDecl *, llvm::SmallVector<const FunctionDecl *, 2>>
      &Overriders;
  ProgramModel &Program;
  const FunctionDecl *Caller = nullptr;
};

} // namespace

void ProgramModel::buildCallGraph() {
  if (GraphBuilt)
    return;
  GraphBuilt = true;
  std::vector<Decl *> UserDecls = UserCodeTraversal::userDeclarations(Ctx);
  for (Decl *D : UserDecls)
    Graph.addToCallGraph(D);
  ReferenceCounter Counter(NonCallReferences);
  for (Decl *D : UserDecls)
    Counter.TraverseDecl(D);
  SiteCollector Collector(Sites, LambdaCreations, CallableCalls, Overriders,
                          *this);
  for (Decl *D : UserDecls)
    Collector.TraverseDecl(D);

  // Every node is a root, so that the SCC walk sees functions that are
  // called only from others (static functions, instantiations).
  CallGraphNode *Root = Graph.getRoot();
  llvm::DenseSet<const CallGraphNode *> RootCallees;
  for (const CallGraphNode::CallRecord &R : *Root)
    RootCallees.insert(R.Callee);
  std::vector<std::pair<SourceLocation, CallGraphNode *>> Nodes;
  for (const auto &Entry : Graph)
    if (Entry.second.get() != Root && Entry.first)
      Nodes.push_back({Entry.first->getLocation(), Entry.second.get()});
  llvm::stable_sort(Nodes, [](const auto &A, const auto &B) {
    return A.first.getRawEncoding() < B.first.getRawEncoding();
  });
  for (const auto &[Loc, Node] : Nodes) {
    if (!RootCallees.contains(Node))
      Root->addCallee({Node, nullptr});
    if (const auto *FD = dyn_cast_or_null<FunctionDecl>(Node->getDecl()))
      HasMain |= FD->isMain();
  }
  for (auto SCC = llvm::scc_begin(&std::as_const(Graph)); !SCC.isAtEnd();
       ++SCC) {
    const std::vector<const CallGraphNode *> &Members = *SCC;
    if (Members.size() <= 1 && !SCC.hasCycle())
      continue;
    for (const CallGraphNode *N : Members)
      if (const auto *FD = dyn_cast_or_null<FunctionDecl>(N->getDecl()))
        Recursive.insert(FD->getCanonicalDecl());
  }
  // Deterministic order of each function's call sites.
  for (auto &Entry : Sites)
    llvm::stable_sort(Entry.second, [](const CallSite &A, const CallSite &B) {
      return A.Call->getBeginLoc().getRawEncoding() <
             B.Call->getBeginLoc().getRawEncoding();
    });
}

const CallGraph &ProgramModel::callGraph() {
  buildCallGraph();
  return Graph;
}

llvm::ArrayRef<CallSite> ProgramModel::callSitesOf(const FunctionDecl &Callee) {
  buildCallGraph();
  auto It = Sites.find(Callee.getCanonicalDecl());
  return It == Sites.end() ? llvm::ArrayRef<CallSite>() : It->second;
}

llvm::ArrayRef<const FunctionDecl *>
ProgramModel::overridersOf(const CXXMethodDecl &Method) {
  buildCallGraph();
  auto It = Overriders.find(Method.getCanonicalDecl());
  return It == Overriders.end() ? llvm::ArrayRef<const FunctionDecl *>()
                                : llvm::ArrayRef(It->second);
}

std::vector<const FunctionDecl *> ProgramModel::calledFunctions() {
  buildCallGraph();
  std::vector<const FunctionDecl *> Out;
  for (const auto &Entry : Sites)
    Out.push_back(Entry.first);
  return Out;
}

llvm::ArrayRef<CallSite> ProgramModel::creationSitesOf(const FunctionDecl &Op) {
  buildCallGraph();
  auto It = LambdaCreations.find(Op.getCanonicalDecl());
  return It == LambdaCreations.end() ? llvm::ArrayRef<CallSite>() : It->second;
}

bool ProgramModel::isAddressTaken(const FunctionDecl &F) {
  buildCallGraph();
  return NonCallReferences.lookup(F.getCanonicalDecl()) > 0;
}

bool ProgramModel::isRecursive(const FunctionDecl &F) {
  buildCallGraph();
  return Recursive.contains(F.getCanonicalDecl());
}

bool ProgramModel::programDefinesMain() {
  buildCallGraph();
  if (HasMain && (Config.External || Config.WholeProgram))
    return true; // what the program's facts would say: nothing to read
  // Asked without an audit's facts too: the audit reruns the TU with them.
  Reads.Main = true;
  return Config.External &&
         (HasMain || Config.External->definesMainFor(mainFileName()));
}

std::string ProgramModel::mainFileName() const {
  const SourceManager &SM = Ctx.getSourceManager();
  OptionalFileEntryRef File = SM.getFileEntryRefForID(SM.getMainFileID());
  if (!File)
    return "";
  // Absolute: two directories of one database may each have a `util.cpp`.
  llvm::StringRef Real = File->getFileEntry().tryGetRealPathName();
  return (Real.empty() ? File->getName() : Real).str();
}

} // namespace clang::tidy::torch
