//===--- ProgramModel.cpp - torch-tidy ------------------------------------===//
//
// The model's registry, its call graph, and its analyses and summaries.
// Entry contexts are in Contexts.cpp, the judging of requirements in
// Judging.cpp, program-wide facts in ProgramFacts.cpp.
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
#include <map>
#include <mutex>

namespace clang::tidy::torch {

//===--- Sharing ----------------------------------------------------------===//

namespace {
std::mutex RegistryMutex;
std::map<const ASTContext *, std::weak_ptr<ProgramModel>> Registry;
} // namespace

std::shared_ptr<ProgramModel> ProgramModel::get(ASTContext &Ctx,
                                                const ModelConfig &Config) {
  std::lock_guard<std::mutex> Lock(RegistryMutex);
  // Models whose TU is over (every holder dropped them) leave the registry.
  for (auto It = Registry.begin(); It != Registry.end();)
    It = It->second.expired() ? Registry.erase(It) : std::next(It);
  std::weak_ptr<ProgramModel> &Slot = Registry[&Ctx];
  if (std::shared_ptr<ProgramModel> Existing = Slot.lock())
    return Existing;
  auto Model = std::make_shared<ProgramModel>(Ctx, Config);
  Slot = Model;
  return Model;
}

ProgramModel::ProgramModel(ASTContext &Ctx, ModelConfig Config)
    : Ctx(Ctx), Config(std::move(Config)) {}

ProgramModel::~ProgramModel() = default;

//===--- Call graph -------------------------------------------------------===//

namespace {

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
  bool VisitDeclRefExpr(DeclRefExpr *Ref) {
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
      std::vector<CallSite> &CallableCalls, ProgramModel &Program)
      : Out(Out), Creations(Creations), CallableCalls(CallableCalls),
        Program(Program) {}
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
    if (FD->isInStdNamespace() && FD->getIdentifier() &&
        (FD->getName() == "make_shared" || FD->getName() == "make_unique")) {
      if (const CXXRecordDecl *RD = Call->getType()->getAsCXXRecordDecl())
        if (const auto *Spec = dyn_cast<ClassTemplateSpecializationDecl>(RD);
            Spec && Spec->getTemplateArgs().size() >= 1 &&
            Spec->getTemplateArgs()[0].getKind() == TemplateArgument::Type)
          if (const CXXRecordDecl *Held =
                  Spec->getTemplateArgs()[0].getAsType()->getAsCXXRecordDecl())
            addConstruction(*Held, Call->getNumArgs(), Call);
      return true;
    }
    add(FD, Call);
    if (isLibraryFunction(*FD) && !storesCallableArgument(*FD))
      for (const Expr *Arg : Call->arguments())
        if (const auto *Lambda =
                dyn_cast<LambdaExpr>(stripConversions(Arg)->IgnoreImplicit()))
          add(Lambda->getCallOperator(), Call);
    return true;
  }
  bool VisitCXXConstructExpr(CXXConstructExpr *Construct) {
    const CXXConstructorDecl *Ctor = Construct->getConstructor();
    add(Ctor, Construct);
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
  void add(const FunctionDecl *Callee, const Expr *Call) {
    if (!Callee || !Caller)
      return;
    if (isSystemHeaderDecl(*Callee, Program.context().getSourceManager()) &&
        !isa<CXXConstructorDecl>(Callee))
      return;
    Out[Callee->getCanonicalDecl()].push_back({Call, Caller});
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
  SiteCollector Collector(Sites, LambdaCreations, CallableCalls, *this);
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

//===--- Analyses ---------------------------------------------------------===//

const FunctionDecl *ProgramModel::definitionOf(const FunctionDecl &F) const {
  const FunctionDecl *Definition = nullptr;
  if (!F.hasBody(Definition) || !Definition)
    return nullptr;
  if (isSystemHeaderDecl(*Definition, Ctx.getSourceManager()))
    return nullptr;
  return Definition;
}

namespace {
/// Whether a template pattern's body depends on its template parameters.
class DependenceFinder : public RecursiveASTVisitor<DependenceFinder> {
public:
  bool VisitExpr(Expr *E) {
    Found |= E->isTypeDependent() || E->isValueDependent() ||
             E->containsUnexpandedParameterPack();
    return !Found;
  }
  bool VisitVarDecl(VarDecl *VD) {
    Found |= VD->getType()->isDependentType();
    return !Found;
  }
  bool Found = false;
};
} // namespace

bool ProgramModel::isAnalyzable(const FunctionDecl &Function) {
  const FunctionDecl *Definition = definitionOf(Function);
  if (!Definition || Definition != &Function)
    return false;
  if (!Function.isDependentContext())
    return true;
  // A pattern: only a function template with no instantiation in the TU
  // whose body does not depend on its parameters.
  const FunctionTemplateDecl *Template = Function.getDescribedFunctionTemplate();
  if (!Template || !Template->specializations().empty())
    return false;
  if (const auto *Method = dyn_cast<CXXMethodDecl>(&Function))
    if (Method->getParent()->isDependentContext())
      return false;
  DependenceFinder Finder;
  Finder.TraverseStmt(Function.getBody());
  return !Finder.Found;
}

/// The variables a lambda's call operator captures, or none.
static llvm::SmallVector<const VarDecl *, 4>
capturedVariables(const FunctionDecl &F) {
  llvm::SmallVector<const VarDecl *, 4> Out;
  const auto *Method = dyn_cast<CXXMethodDecl>(&F);
  if (!Method || !Method->getParent()->isLambda())
    return Out;
  for (const LambdaCapture &C : Method->getParent()->captures())
    if (C.capturesVariable())
      if (const auto *VD = dyn_cast<VarDecl>(C.getCapturedVar()))
        Out.push_back(VD);
  return Out;
}

/// The class whose members `this` names in \p F (the enclosing method's,
/// for a lambda that captures `this`); null for a free function.
static const CXXRecordDecl *thisClass(const FunctionDecl &F) {
  const auto *Method = dyn_cast<CXXMethodDecl>(&F);
  if (!Method || Method->isStatic())
    return nullptr;
  const CXXRecordDecl *Class = Method->getParent();
  if (Class->isLambda()) {
    const auto *Enclosing =
        dyn_cast_or_null<CXXMethodDecl>(Class->getDeclContext());
    if (!Enclosing || Enclosing->isStatic())
      return nullptr;
    Class = Enclosing->getParent();
  }
  return Class;
}

/// Whether a location of this type is worth a fact.
static bool isTrackedType(QualType T) {
  T = T.getNonReferenceType();
  return isTensorType(T) || isModuleHandleType(T) || isDeviceType(T) ||
         isTensorOptionsType(T) || T->isBooleanType() || T->isIntegerType() ||
         isCallableType(T);
}

/// "Whatever \p D held at entry": a device is the symbolic device it names.
static ValueFacts entryValueOf(const ValueDecl &D) {
  ValueFacts F = ValueFacts::atEntry(D);
  if (isDeviceType(D.getType().getNonReferenceType())) {
    F.Device = {DeviceValue::symbolic(&D), D.getLocation()};
  }
  return F;
}

State ProgramModel::parametricEntry(const FunctionDecl &Function) {
  State Entry;
  for (const ParmVarDecl *P : Function.parameters())
    if (isTrackedType(P->getType()))
      Entry.set(Location::local(P), entryValueOf(*P));
  for (const VarDecl *V : capturedVariables(Function))
    if (isTrackedType(V->getType()))
      Entry.set(Location::local(V), entryValueOf(*V));
  const CXXRecordDecl *Class = thisClass(Function);
  if (!Class || isa<CXXConstructorDecl>(Function) || Class->isDependentContext())
    return Entry;
  // A method's members start as the class state says, tagged as entry
  // values so that a caller that knows better can say so.
  if (!isBuilding(Class)) {
    for (const auto &[Member, Facts] : classState(*Class).Members) {
      ValueFacts F = Facts;
      if (const FieldDecl *Field = Selector::fromRaw(Member.Path[0]).asField())
        F.Device.Entry = F.Pin.Entry = F.Graph.Entry = F.Mode.Entry = Field;
      Entry.set(Member, F);
    }
  }
  for (const FieldDecl *Field : Class->fields())
    if (isTrackedType(Field->getType()) && !Entry.lookup(Location::member(Field)))
      Entry.set(Location::member(Field), entryValueOf(*Field));
  return Entry;
}

std::unique_ptr<FlowAnalysis> ProgramModel::analyse(const FunctionDecl &Function,
                                                    State Entry) {
  return FlowAnalysis::run(Function, *this, std::move(Entry));
}

const FlowAnalysis *
ProgramModel::summaryAnalysis(const FunctionDecl &Function) {
  auto It = SummaryAnalyses.find(&Function);
  if (It == SummaryAnalyses.end()) {
    std::unique_ptr<FlowAnalysis> A;
    unsigned Cuts = BuildCuts;
    if (isAnalyzable(Function)) {
      InProgress.insert(Function.getCanonicalDecl());
      ++Depth;
      A = analyse(Function, parametricEntry(Function));
      --Depth;
      InProgress.erase(Function.getCanonicalDecl());
    }
    if (!keepable(Cuts)) {
      TransientAnalyses.push_back(std::move(A));
      const FlowAnalysis *T = TransientAnalyses.back().get();
      return T && T->converged() ? T : nullptr;
    }
    It = SummaryAnalyses.try_emplace(&Function, std::move(A)).first;
  }
  const FlowAnalysis *A = It->second.get();
  return A && A->converged() ? A : nullptr;
}

const FlowAnalysis *ProgramModel::analysis(const FunctionDecl &Function) {
  auto It = ContextAnalyses.find(&Function);
  if (It != ContextAnalyses.end()) {
    const FlowAnalysis *A = It->second.get();
    return A && A->converged() ? A : nullptr;
  }
  if (!isAnalyzable(Function))
    return nullptr;
  // Reserve the slot: a caller's analysis that asks for this function's
  // context does not come back here.
  ContextAnalyses.try_emplace(&Function, nullptr);
  unsigned Cuts = BuildCuts;
  const EntryContext &Context = entryContext(Function);
  std::unique_ptr<FlowAnalysis> A = analyse(Function, Context.Entry);
  const FlowAnalysis *Result = A && A->converged() ? A.get() : nullptr;
  if (!keepable(Cuts)) {
    ContextAnalyses.erase(&Function);
    TransientAnalyses.push_back(std::move(A));
    return Result;
  }
  ContextAnalyses[&Function] = std::move(A);
  return Result;
}

//===--- Summaries --------------------------------------------------------===//

/// Calls deeper than this are unknown: the stack of analyses stays bounded.
static constexpr unsigned MaxSummaryDepth = 48;

const FunctionSummary *ProgramModel::summary(const FunctionDecl &F) {
  const FunctionDecl *Canonical = F.getCanonicalDecl();
  auto It = Summaries.find(Canonical);
  if (It != Summaries.end())
    return It->second ? &*It->second : nullptr;
  if (InProgress.contains(Canonical) || Depth >= MaxSummaryDepth)
    return nullptr; // not cached: the outer computation decides
  if (const auto *Method = dyn_cast<CXXMethodDecl>(Canonical);
      Method && !isa<CXXConstructorDecl>(Method) &&
      isBuilding(Method->getParent())) {
    ++BuildCuts;
    return nullptr;
  }
  unsigned Cuts = BuildCuts;
  std::optional<FunctionSummary> Result;
  if (const FunctionDecl *Definition = definitionOf(F)) {
    if (!isRecursive(F) && isAnalyzable(*Definition))
      if (const FlowAnalysis *A = summaryAnalysis(*Definition))
        Result = buildSummary(*Definition, *A);
  } else if (!isSystemHeaderDecl(F, Ctx.getSourceManager())) {
    Reads.Summaries.insert(usrOf(F));
    if (Config.External)
      Result = Config.External->lookup(F, *this);
  }
  if (!keepable(Cuts)) {
    if (!Result)
      return nullptr;
    TransientSummaries.push_back(
        std::make_unique<FunctionSummary>(std::move(*Result)));
    return TransientSummaries.back().get();
  }
  auto &Slot = Summaries[Canonical];
  Slot = std::move(Result);
  return Slot ? &*Slot : nullptr;
}

const FunctionSummary *ProgramModel::summaryForCall(const Expr &E) {
  const FunctionDecl *Callee = nullptr;
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(&E)) {
    Callee = Construct->getConstructor();
  } else if (const auto *Call = dyn_cast<CallExpr>(&E)) {
    Callee = certainCallee(*Call);
  }
  if (!Callee || isLibraryFunction(*Callee))
    return nullptr;
  if (const auto *Call = dyn_cast<CallExpr>(&E);
      Call && callsClassUnderConstruction(*Call))
    return nullptr;
  return summary(*Callee);
}

//===--- Names ------------------------------------------------------------===//

namespace {
/// The named declarations of the user code, by USR.
class USRIndexer : public RecursiveASTVisitor<USRIndexer> {
public:
  explicit USRIndexer(llvm::StringMap<const NamedDecl *> &Out) : Out(Out) {}
  bool VisitNamedDecl(NamedDecl *D) {
    if (isa<FieldDecl, FunctionDecl, VarDecl>(D)) {
      std::string USR = usrOf(*D);
      if (!USR.empty())
        Out.try_emplace(USR, D);
    }
    return true;
  }

private:
  llvm::StringMap<const NamedDecl *> &Out;
};
} // namespace

const NamedDecl *ProgramModel::declarationOf(llvm::StringRef USR) {
  if (USR.empty())
    return nullptr;
  if (!DeclarationsByUSR) {
    DeclarationsByUSR.emplace();
    USRIndexer Indexer(*DeclarationsByUSR);
    for (Decl *D : UserCodeTraversal::userDeclarations(Ctx))
      Indexer.TraverseDecl(D);
  }
  return DeclarationsByUSR->lookup(USR);
}

const CallStep *ProgramModel::step(SourceLocation Call, llvm::StringRef Callee,
                                   const CallStep *Next) {
  llvm::StringRef Saved = Strings.save(Callee);
  auto Key = std::make_pair(Next, std::make_pair(Call.getRawEncoding(),
                                                 Saved.data()));
  const CallStep *&Slot = Steps[Key];
  if (!Slot)
    Slot = new (Arena.Allocate<CallStep>()) CallStep{Call, Saved, Next};
  return Slot;
}

std::string ProgramModel::calleeName(const FunctionDecl &F) const {
  if (const auto *Method = dyn_cast<CXXMethodDecl>(&F);
      Method && Method->getParent()->isLambda())
    return "the lambda";
  if (const auto *Ctor = dyn_cast<CXXConstructorDecl>(&F))
    return "'" + Ctor->getParent()->getNameAsString() + "'";
  std::string Name;
  llvm::raw_string_ostream OS(Name);
  F.getNameForDiagnostic(OS, Ctx.getPrintingPolicy(), /*Qualified=*/false);
  return "'" + Name + "()'";
}

} // namespace clang::tidy::torch
