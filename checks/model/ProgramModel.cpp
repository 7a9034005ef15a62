//===--- ProgramModel.cpp - torch-tidy ------------------------------------===//

#include "ProgramModel.h"
#include "SummaryBuilder.h"
#include "TensorFlowAnalysis.h"
#include "api/TorchMatchers.h"
#include "model/UserCodeParents.h"
#include "model/UserCodeTraversal.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "llvm/ADT/SCCIterator.h"
#include <map>
#include <mutex>

namespace clang::tidy::torch {

//===--- Sharing ----------------------------------------------------------===//

namespace {

/// One key per TU and configuration.
std::string optionsKey(const TorchApiOptions &Opts) {
  std::string Key;
  for (const auto *List :
       {&Opts.ExtraSyncFunctions, &Opts.ExtraFactories,
        &Opts.ExtraPinnedAllocators, &Opts.ExtraBackwardFunctions,
        &Opts.ExtraStepFunctions}) {
    for (const std::string &N : *List)
      Key += N + ",";
    Key += ";";
  }
  return Key;
}

std::mutex RegistryMutex;
std::map<std::pair<const ASTContext *, std::string>,
         std::weak_ptr<ProgramModel>>
    Registry;
std::shared_ptr<const ExternalSummaries> CurrentExternal;

} // namespace

std::shared_ptr<ProgramModel> ProgramModel::get(ASTContext &Ctx,
                                                const TorchApiOptions &Opts) {
  std::lock_guard<std::mutex> Lock(RegistryMutex);
  // Models whose TU is over (every check dropped them) leave the registry.
  for (auto It = Registry.begin(); It != Registry.end();)
    It = It->second.expired() ? Registry.erase(It) : std::next(It);
  std::weak_ptr<ProgramModel> &Slot = Registry[{&Ctx, optionsKey(Opts)}];
  if (std::shared_ptr<ProgramModel> Existing = Slot.lock())
    return Existing;
  auto Model = std::make_shared<ProgramModel>(Ctx, Opts);
  Model->External = CurrentExternal;
  // The TU's models with other options record into the same reads.
  for (auto It = Registry.lower_bound({&Ctx, ""});
       It != Registry.end() && It->first.first == &Ctx; ++It)
    if (std::shared_ptr<ProgramModel> Other = It->second.lock()) {
      Model->Reads = Other->Reads;
      break;
    }
  if (!Model->Reads)
    Model->Reads = std::make_shared<ExternalReads>();
  Slot = Model;
  return Model;
}

void ProgramModel::setExternalSummaries(
    std::shared_ptr<const ExternalSummaries> S) {
  std::lock_guard<std::mutex> Lock(RegistryMutex);
  CurrentExternal = std::move(S);
}

ProgramModel::ProgramModel(ASTContext &Ctx, const TorchApiOptions &Opts)
    : Ctx(Ctx), Opts(Opts) {}

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
    // `obj.method(...)`: the object may hold other escapes.
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
  // The graph's map is unordered: sort for deterministic call-site lists.
  llvm::stable_sort(Nodes, [](const auto &A, const auto &B) {
    return A.first.getRawEncoding() < B.first.getRawEncoding();
  });
  for (const auto &[Loc, Node] : Nodes)
    if (!RootCallees.contains(Node))
      Root->addCallee({Node, nullptr});

  for (auto SCC = llvm::scc_begin(&std::as_const(Graph)); !SCC.isAtEnd();
       ++SCC) {
    const std::vector<const CallGraphNode *> &Members = *SCC;
    bool Cycle = Members.size() > 1 || SCC.hasCycle();
    if (!Cycle)
      continue;
    for (const CallGraphNode *N : Members)
      if (const auto *FD = dyn_cast_or_null<FunctionDecl>(N->getDecl()))
        Recursive.insert(FD->getCanonicalDecl());
  }

  for (const auto &[Loc, Node] : Nodes) {
    const auto *Caller = dyn_cast_or_null<FunctionDecl>(Node->getDecl());
    if (!Caller)
      continue;
    if (Caller->isMain())
      HasMain = true;
    // A node is keyed by the canonical declaration; the calls are in the
    // definition's body.
    const FunctionDecl *Definition = definitionOf(*Caller);
    for (const CallGraphNode::CallRecord &R : *Node) {
      const auto *Callee =
          dyn_cast_or_null<FunctionDecl>(R.Callee ? R.Callee->getDecl() : nullptr);
      if (!Callee || !R.CallExpr)
        continue;
      Sites[Callee->getCanonicalDecl()].push_back(
          {R.CallExpr, Definition ? Definition : Caller});
    }
  }
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

bool ProgramModel::isAddressTaken(const FunctionDecl &F) {
  buildCallGraph();
  const FunctionDecl *Canonical = F.getCanonicalDecl();
  return NonCallReferences.lookup(Canonical) > 0;
}

bool ProgramModel::isRecursive(const FunctionDecl &F) {
  buildCallGraph();
  return Recursive.contains(F.getCanonicalDecl());
}

bool ProgramModel::definesMain() {
  buildCallGraph();
  return HasMain;
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

TensorState ProgramModel::entryState(const FunctionDecl &Function) {
  TensorState Entry;
  for (const ParmVarDecl *P : Function.parameters()) {
    QualType T = P->getType();
    if (isTensorType(T.getNonReferenceType()) || isModuleHandleType(T))
      Entry.set({P, nullptr}, ValueFacts::ofParameter(*P));
  }
  const auto *Method = dyn_cast<CXXMethodDecl>(&Function);
  if (!Method || Method->isStatic() || isa<CXXConstructorDecl>(Method))
    return Entry;
  const CXXRecordDecl *Class = Method->getParent();
  // A lambda that captures `this` sees the members of the method it is in.
  if (Class->isLambda()) {
    const auto *Enclosing =
        dyn_cast_or_null<CXXMethodDecl>(Class->getDeclContext());
    if (!Enclosing || Enclosing->isStatic() || isa<CXXConstructorDecl>(Enclosing))
      return Entry;
    Class = Enclosing->getParent();
  }
  if (isBuilding(Class) || Class->isDependentContext())
    return Entry;
  for (const auto &[Field, Facts] : classState(*Class).Members)
    Entry.set({nullptr, Field}, Facts);
  return Entry;
}

std::unique_ptr<TensorFlowAnalysis>
ProgramModel::analyse(const FunctionDecl &Function, const TensorState *Entry) {
  TensorState Start = Entry ? *Entry : entryState(Function);
  return TensorFlowAnalysis::run(Function, *Function.getBody(), Ctx, Opts,
                                 TensorFlowAnalysis::DefaultVisitsPerBlock,
                                 this, &Start);
}

const TensorFlowAnalysis *ProgramModel::analysis(const FunctionDecl &Function) {
  auto It = Analyses.find(&Function);
  if (It == Analyses.end()) {
    std::unique_ptr<TensorFlowAnalysis> A;
    if (isAnalyzable(Function)) {
      InProgress.insert(Function.getCanonicalDecl());
      ++Depth;
      A = analyse(Function, nullptr);
      --Depth;
      InProgress.erase(Function.getCanonicalDecl());
    }
    It = Analyses.try_emplace(&Function, std::move(A)).first;
  }
  const TensorFlowAnalysis *A = It->second.get();
  return A && A->converged() ? A : nullptr;
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
  // A member function of a class whose state is being computed would be
  // analysed without that state: not now (its constructors are needed).
  if (const auto *Method = dyn_cast<CXXMethodDecl>(Canonical);
      Method && !isa<CXXConstructorDecl>(Method) &&
      isBuilding(Method->getParent()))
    return nullptr;
  std::optional<FunctionSummary> Result;
  if (const FunctionDecl *Definition = definitionOf(F)) {
    if (!isRecursive(F) && isAnalyzable(*Definition))
      if (const TensorFlowAnalysis *A = analysis(*Definition))
        Result = buildSummary(*Definition, *A, *this);
  } else {
    Reads->Summaries.insert(usrOf(F));
    if (External)
      Result = External->lookup(F, *this);
  }
  auto &Slot = Summaries[Canonical];
  Slot = std::move(Result);
  return Slot ? &*Slot : nullptr;
}

const FunctionSummary *ProgramModel::summaryForCall(const Expr &E) {
  const auto *Call = dyn_cast<CallExpr>(&E);
  const FunctionDecl *Callee = Call ? Call->getDirectCallee() : nullptr;
  if (!Callee || isLibraryFunction(*Callee))
    return nullptr;
  if (const auto *Method = dyn_cast<CXXMethodDecl>(Callee);
      Method && Method->isVirtual()) {
    // Only a call whose target is certain: a qualified call, a final
    // method, or an object whose dynamic type is its static type.
    const auto *Member = dyn_cast<CXXMemberCallExpr>(Call);
    const auto *ME =
        Member ? dyn_cast<MemberExpr>(Member->getCallee()->IgnoreParens())
               : nullptr;
    const CXXMethodDecl *Target = nullptr;
    if (ME && ME->hasQualifier())
      Target = Method;
    else if (ME)
      Target = Method->getDevirtualizedMethod(ME->getBase(),
                                              /*IsAppleKext=*/false);
    if (!Target)
      return nullptr;
    Callee = Target;
  }
  return summary(*Callee);
}

std::optional<EntryContext>
ProgramModel::entryContext(const FunctionDecl &F) const {
  std::string USR = usrOf(F);
  Reads->Entries.insert(USR);
  return External ? External->entry(USR) : std::nullopt;
}

const ClassState &ProgramModel::classState(const CXXRecordDecl &Class) {
  const CXXRecordDecl *Key = Class.getCanonicalDecl();
  auto It = Classes.find(Key);
  if (It != Classes.end())
    return *It->second;
  static const ClassState Nothing;
  if (isBuilding(Key))
    return Nothing; // a cycle; not cached
  Building.push_back(Key);
  auto State = std::make_unique<ClassState>(computeClassState(Class, *this));
  Building.pop_back();
  return *Classes.try_emplace(Key, std::move(State)).first->second;
}

bool ProgramModel::isBuilding(const CXXRecordDecl *Class) const {
  return Class && llvm::is_contained(Building, Class->getCanonicalDecl());
}

bool ProgramModel::callsClassUnderConstruction(const CallExpr &Call) const {
  if (Building.empty())
    return false;
  const auto *Member = dyn_cast<CXXMemberCallExpr>(&Call);
  const CXXMethodDecl *Method = Member ? Member->getMethodDecl() : nullptr;
  const Expr *Object = Member ? Member->getImplicitObjectArgument() : nullptr;
  return Method && !Method->isStatic() && Object &&
         isa<CXXThisExpr>(Object->IgnoreParenImpCasts()) &&
         isBuilding(Method->getParent());
}

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

//===--- Paths ------------------------------------------------------------===//

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
