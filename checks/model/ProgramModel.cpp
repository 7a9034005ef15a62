//===--- ProgramModel.cpp - torch-tidy ------------------------------------===//
//
// The model's registry, and its analyses and summaries. The call graph and
// the call sites are in CallGraph.cpp, entry contexts in Contexts.cpp, the
// judging of requirements in Judging.cpp, program-wide facts in
// ProgramFacts.cpp.
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

llvm::SmallVector<const VarDecl *, 4>
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

bool isForeignVariable(const Location &L, const FunctionDecl *Function) {
  return L.Kind == Location::Local && !L.Depth && L.Root && Function &&
         isa<VarDecl>(L.Root) && !isa<ParmVarDecl>(L.Root) &&
         L.Root->getDeclContext() != Function &&
         L.Root->getDeclContext()->isFunctionOrMethod() &&
         !llvm::is_contained(capturedVariables(*Function), L.Root);
}

bool isScalarType(QualType T) {
  T = T.getNonReferenceType();
  if (T->isBooleanType() || T->isIntegerType())
    return true;
  const auto *Enum = T->getAs<EnumType>();
  return Enum && ((!isTorchNamespaceDecl(*Enum->getDecl()) &&
                   !Enum->getDecl()->isInStdNamespace()) ||
                  isDtypeType(T));
}

bool outlivesFunction(const Location &L, const FunctionDecl *Function) {
  if (L.Kind == Location::Global && !L.Depth)
    return true;
  return L.Kind == Location::Local && !L.Depth && L.Root && Function &&
         isa<VarDecl>(L.Root) && !isa<ParmVarDecl>(L.Root) &&
         L.Root->getDeclContext() != Function;
}

bool withinDeclaringFunction(const Location &L, SourceLocation Loc) {
  const auto *Owner =
      L.Root ? dyn_cast<FunctionDecl>(L.Root->getDeclContext()) : nullptr;
  const Stmt *Body = Owner ? Owner->getBody() : nullptr;
  if (!Body)
    return true;
  const SourceManager &SM = Owner->getASTContext().getSourceManager();
  return SM.isPointWithin(Loc, Body->getBeginLoc(), Body->getEndLoc());
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
  return isTorchValueType(T) || isScalarType(T) ||
         isCallableType(T) || isStringType(T);
}

/// "Whatever \p D held at entry": a device is the symbolic device it names.
static ValueFacts entryValueOf(const ValueDecl &D) {
  ValueFacts F = ValueFacts::atEntry(D);
  if (isDeviceType(D.getType().getNonReferenceType())) {
    F.Device = {DeviceValue::symbolic(&D), D.getLocation()};
  }
  return F;
}

/// The function a callable argument names where it is written: a lambda,
/// `f` or `&f`; null for anything else.
static const FunctionDecl *writtenCallable(const Expr *Arg) {
  while (Arg) {
    Arg = Arg->IgnoreImplicit()->IgnoreParens();
    if (const auto *Construct = dyn_cast<CXXConstructExpr>(Arg);
        Construct && Construct->getNumArgs() == 1) {
      Arg = Construct->getArg(0);
      continue;
    }
    if (const auto *Cast = dyn_cast<CXXFunctionalCastExpr>(Arg)) {
      Arg = Cast->getSubExpr();
      continue;
    }
    if (const auto *UO = dyn_cast<UnaryOperator>(Arg);
        UO && UO->getOpcode() == UO_AddrOf) {
      Arg = UO->getSubExpr();
      continue;
    }
    break;
  }
  if (const auto *Lambda = dyn_cast_or_null<LambdaExpr>(Arg))
    return Lambda->getCallOperator();
  if (const auto *Ref = dyn_cast_or_null<DeclRefExpr>(Arg))
    return dyn_cast<FunctionDecl>(Ref->getDecl());
  return nullptr;
}

std::optional<llvm::SmallVector<const FunctionDecl *, 2>>
ProgramModel::writtenCallables(const FunctionDecl &Function, unsigned Index) {
  // Only where no other TU may call it: a function first declared in the
  // main file, or a method of a class the main file defines.
  const SourceManager &SM = Ctx.getSourceManager();
  const auto *Method = dyn_cast<CXXMethodDecl>(&Function);
  const Decl *Declared = Method ? static_cast<const Decl *>(Method->getParent())
                                : Function.getCanonicalDecl();
  if (!SM.isInMainFile(SM.getExpansionLoc(Declared->getLocation())) ||
      (Method && Method->isVirtual()) || (!Method && isAddressTaken(Function)))
    return std::nullopt;
  llvm::ArrayRef<CallSite> Sites = callSitesOf(Function);
  if (Sites.empty())
    return std::nullopt;
  llvm::SmallVector<const FunctionDecl *, 2> Callables;
  for (const CallSite &Site : Sites) {
    const Expr *Arg = nullptr;
    if (const auto *Call = dyn_cast<CallExpr>(Site.Call)) {
      unsigned Offset = isa<CXXOperatorCallExpr>(Call) ? 1 : 0;
      if (Index + Offset < Call->getNumArgs())
        Arg = Call->getArg(Index + Offset);
    } else if (const auto *Construct = dyn_cast<CXXConstructExpr>(Site.Call)) {
      if (Index < Construct->getNumArgs())
        Arg = Construct->getArg(Index);
    }
    const FunctionDecl *Written = writtenCallable(Arg);
    if (!Written)
      return std::nullopt;
    if (!llvm::is_contained(Callables, Written))
      Callables.push_back(Written);
  }
  return Callables;
}

State ProgramModel::parametricEntry(const FunctionDecl &Function) {
  State Entry;
  for (const ParmVarDecl *P : Function.parameters()) {
    // The callables a callable parameter, or a struct parameter's fields
    // (a config's hooks), hold: the callers'.
    QualType T = P->getType().getNonReferenceType();
    if (isTrackedType(P->getType())) {
      ValueFacts F = entryValueOf(*P);
      // A callable that every call of a free function writes (a lambda,
      // `&f`) is that code in any context; else the callers' context says
      // (a method's, the class state: a setter's hook runs later).
      if (isCallableType(T)) {
        if (auto Written = isa<CXXMethodDecl>(Function)
                               ? std::nullopt
                               : writtenCallables(Function,
                                                  P->getFunctionScopeIndex())) {
          F.Callables.assign(Written->begin(), Written->end());
          F.CallablesKnown = true;
        } else {
          F.CallablesAtEntry = {P, nullptr};
        }
      }
      Entry.set(Location::local(P), F);
    }
    const CXXRecordDecl *RD = T->getAsCXXRecordDecl();
    if (!RD || !RD->hasDefinition() || isTorchValueType(T) ||
        containerRecord(T) || isCallableType(T) || RD->isLambda())
      continue;
    for (const FieldDecl *Field : fieldsWithBases(*RD))
      if (isCallableType(Field->getType())) {
        ValueFacts Part;
        Part.CallablesAtEntry = {P, Field};
        Entry.set(Location::local(P).child(Selector::field(Field)), Part);
      }
  }
  for (const VarDecl *V : capturedVariables(Function))
    if (isTrackedType(V->getType()))
      Entry.set(Location::local(V), entryValueOf(*V));
  const CXXRecordDecl *Class = thisClass(Function);
  if (!Class || isa<CXXConstructorDecl>(Function) || Class->isDependentContext())
    return Entry;
  // A method's members start as the class state says, tagged as entry
  // values so that a caller that knows better can say so.
  // While the class state is being built, its members are entry values
  // only: an analysis from there is not kept.
  if (isBuilding(Class))
    ++BuildCuts;
  else {
    for (const auto &[Member, Facts] : classState(*Class).Members) {
      ValueFacts F = Facts;
      if (const FieldDecl *Field = Selector::fromRaw(Member.Path[0]).asField())
        F.Device.Entry = F.Pin.Entry = F.Graph.Entry = F.Mode.Entry = Field;
      Entry.set(Member, F);
    }
  }
  for (const FieldDecl *Field : fieldsWithBases(*Class))
    if (isTrackedType(Field->getType()) && !Entry.lookup(Location::member(Field)))
      Entry.set(Location::member(Field), entryValueOf(*Field));
  return Entry;
}

ProgramModel::Paying::Paying(ProgramModel &Program, const Decl &Owner)
    : Program(Program), Saved(Program.ReportingFile) {
  if (Saved.isValid())
    return;
  const SourceManager &SM = Program.Ctx.getSourceManager();
  Program.ReportingFile = SM.getFileID(SM.getExpansionLoc(Owner.getLocation()));
}

std::unique_ptr<FlowAnalysis> ProgramModel::analyse(const FunctionDecl &Function,
                                                    State Entry) {
  // A cycle of classes and methods in a large template library (toml++)
  // is analysed again at each visit, and its analyses are not kept: past
  // the budget, a function is not analysed (its calls are opaque).
  unsigned &Run = AnalysesRun[ReportingFile];
  if (Run >= MaxAnalysesPerFile) {
    ++BudgetCuts;
    if (Run++ == MaxAnalysesPerFile)
      FlowAnalysis::reportBudget(Ctx, ReportingFile, MaxAnalysesPerFile);
    return nullptr;
  }
  ++Run;
  // For debugging: `TORCH_TIDY_TRACE=1` prints each analysis run, to find
  // what is analysed again and again (classes under construction, budget).
  if (std::getenv("TORCH_TIDY_TRACE"))
    llvm::errs() << "analyse " << Function.getQualifiedNameAsString()
                 << " (classes being built: " << Building.size()
                 << ", summary depth: " << Depth << ")\n";
  return FlowAnalysis::run(Function, *this, std::move(Entry));
}

const FlowAnalysis *
ProgramModel::summaryAnalysis(const FunctionDecl &Function) {
  auto It = SummaryAnalyses.find(&Function);
  if (It == SummaryAnalyses.end()) {
    std::unique_ptr<FlowAnalysis> A;
    Cuts Before = cuts();
    if (isAnalyzable(Function)) {
      InProgress.insert(Function.getCanonicalDecl());
      ++Depth;
      A = analyse(Function, parametricEntry(Function));
      --Depth;
      InProgress.erase(Function.getCanonicalDecl());
    }
    if (!keepable(Before)) {
      TransientAnalyses.push_back(std::move(A));
      const FlowAnalysis *T = TransientAnalyses.back().get();
      return T && T->converged() ? T : nullptr;
    }
    It = SummaryAnalyses.try_emplace(&Function, std::move(A)).first;
  }
  const FlowAnalysis *A = It->second.get();
  return A && A->converged() ? A : nullptr;
}

bool ProgramModel::isAnalysing(const FunctionDecl &Function) const {
  return AnalysesUnderWay.contains(&Function);
}

const FlowAnalysis *ProgramModel::analysis(const FunctionDecl &Function) {
  auto It = ContextAnalyses.find(&Function);
  if (It != ContextAnalyses.end()) {
    const FlowAnalysis *A = It->second.get();
    return A && A->converged() ? A : nullptr;
  }
  if (!isAnalyzable(Function))
    return nullptr;
  Paying Budget(*this, Function);
  // Reserve the slot: a caller's analysis that asks for this function's
  // context does not come back here.
  ContextAnalyses.try_emplace(&Function, nullptr);
  AnalysesUnderWay.insert(&Function);
  Cuts Before = cuts();
  const EntryContext &Context = entryContext(Function);
  std::unique_ptr<FlowAnalysis> A = analyse(Function, Context.Entry);
  AnalysesUnderWay.erase(&Function);
  ++AnalysesFinished;
  const FlowAnalysis *Result = A && A->converged() ? A.get() : nullptr;
  if (!keepable(Before) || !Context.Complete) {
    ContextAnalyses.erase(&Function);
    TransientAnalyses.push_back(std::move(A));
    return Result;
  }
  ContextAnalyses[&Function] = std::move(A);
  return Result;
}

//===--- Summaries --------------------------------------------------------===//


const FunctionSummary *ProgramModel::summary(const FunctionDecl &F) {
  const FunctionDecl *Canonical = F.getCanonicalDecl();
  auto It = Summaries.find(Canonical);
  if (It != Summaries.end())
    return It->second.get();
  if (!Building.empty())
    if (auto Built = SummariesThisBuild.find(Canonical);
        Built != SummariesThisBuild.end() && Built->second.first == BuildEpoch)
      return Built->second.second;
  if (InProgress.contains(Canonical) || Depth >= MaxSummaryDepth)
    return nullptr; // not cached: the outer computation decides
  if (const auto *Method = dyn_cast<CXXMethodDecl>(Canonical);
      Method && !isa<CXXConstructorDecl>(Method) &&
      isBuilding(Method->getParent())) {
    ++BuildCuts;
    return nullptr;
  }
  Cuts Before = cuts();
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
  if (!keepable(Before)) {
    const FunctionSummary *Short = nullptr;
    if (Result) {
      TransientSummaries.push_back(
          std::make_unique<FunctionSummary>(std::move(*Result)));
      Short = TransientSummaries.back().get();
    }
    if (!Building.empty() && BudgetCuts == Before.Budget)
      SummariesThisBuild[Canonical] = {BuildEpoch, Short};
    return Short;
  }
  auto &Slot = Summaries[Canonical];
  Slot = Result ? std::make_unique<FunctionSummary>(std::move(*Result))
                : nullptr;
  return Slot.get();
}

const FunctionDecl *ProgramModel::calleeOf(const CallExpr &Call) {
  if (const FunctionDecl *Certain = certainCallee(Call))
    return Certain;
  const auto *Method = dyn_cast_or_null<CXXMethodDecl>(Call.getDirectCallee());
  if (!Method || !isa<CXXMemberCallExpr, CXXOperatorCallExpr>(Call))
    return nullptr;
  // Only one definition can run when every class that may override it is
  // in view: its class is the main file's, which no other TU includes.
  const SourceManager &SM = Ctx.getSourceManager();
  if (!SM.isInMainFile(SM.getExpansionLoc(Method->getParent()->getLocation())))
    return nullptr;
  const FunctionDecl *Only = Method->getDefinition();
  for (const FunctionDecl *Override : overridersOf(*Method)) {
    if (Only && Only != Override)
      return nullptr;
    Only = Override;
  }
  return Only;
}

ProgramModel::Dispatched
ProgramModel::dispatchedSummaries(const CallExpr &Call) {
  Dispatched Out;
  // A member call, or an operator of the object its first operand names.
  const auto *Member = dyn_cast<CXXMemberCallExpr>(&Call);
  const auto *Op = dyn_cast<CXXOperatorCallExpr>(&Call);
  const auto *Method = Member || (Op && Op->getNumArgs() > 0)
                           ? dyn_cast_or_null<CXXMethodDecl>(Call.getDirectCallee())
                           : nullptr;
  if (!Method || !Method->isVirtual() || calleeOf(Call) ||
      callsClassUnderConstruction(Call))
    return Out;
  const CXXRecordDecl *Static =
      Member ? Member->getRecordDecl()
             : Op->getArg(0)->getType().getNonReferenceType()->getAsCXXRecordDecl();
  for (const FunctionDecl *Override : overridersOf(*Method)) {
    const CXXRecordDecl *Class = cast<CXXMethodDecl>(Override)->getParent();
    if (Static && Class != Static && !Class->isDerivedFrom(Static))
      continue;
    if (const FunctionSummary *Summary = summary(*Override))
      Out.push_back({Override, Summary});
  }
  return Out;
}

const FunctionSummary *ProgramModel::summaryForCall(const Expr &E) {
  const FunctionDecl *Callee = nullptr;
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(&E)) {
    Callee = constructorThatRuns(Construct->getConstructor());
  } else if (const auto *Call = dyn_cast<CallExpr>(&E)) {
    Callee = calleeOf(*Call);
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
