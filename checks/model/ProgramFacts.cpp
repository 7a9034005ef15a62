//===--- ProgramFacts.cpp - torch-tidy ------------------------------------===//
//
// Facts of the whole TU rather than of one function: the state of a class's
// members between its member functions, what a global holds; and the
// vocabulary that needs the summaries (does this call train?).
//
//===----------------------------------------------------------------------===//

#include "FlowAnalysis.h"
#include "ProgramModel.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "api/Training.h"
#include "support/UserCodeParents.h"
#include "support/UserCodeTraversal.h"
#include "clang/AST/RecursiveASTVisitor.h"

namespace clang::tidy::torch {

//===--- Classes -----------------------------------------------------------===//

const ClassState &ProgramModel::classState(const CXXRecordDecl &Class) {
  const CXXRecordDecl *Key = Class.getCanonicalDecl();
  auto It = Classes.find(Key);
  if (It != Classes.end())
    return *It->second;
  if (auto Provisional = ProvisionalClasses.find(Key);
      Provisional != ProvisionalClasses.end() &&
      Provisional->second.first == AnalysesFinished)
    return *Provisional->second.second;
  static const ClassState Nothing;
  if (isBuilding(Key)) {
    ++BuildCuts;
    return Nothing; // a cycle; not cached
  }
  Building.push_back(Key);
  ++BuildEpoch;
  auto St = std::make_unique<ClassState>(computeClassState(Class, *this));
  Building.pop_back();
  ++BuildEpoch;
  if (St->Provisional) {
    // (The state it replaces may still be referred to: kept aside.)
    auto &Slot = ProvisionalClasses[Key];
    if (Slot.second)
      TransientClasses.push_back(std::move(Slot.second));
    Slot = {AnalysesFinished, std::move(St)};
    return *Slot.second;
  }
  return *Classes.try_emplace(Key, std::move(St)).first->second;
}

bool ProgramModel::isBuilding(const CXXRecordDecl *Class) const {
  return Class && llvm::is_contained(Building, Class->getCanonicalDecl());
}

const CXXRecordDecl *
ProgramModel::buildingObjectOf(const CXXRecordDecl *Class) const {
  if (!Class)
    return nullptr;
  Class = Class->getCanonicalDecl();
  for (const CXXRecordDecl *Built : llvm::reverse(Building))
    if (Built == Class ||
        (Built->hasDefinition() && Class->hasDefinition() &&
         Built->getDefinition()->isDerivedFrom(Class->getDefinition())))
      return Built;
  return nullptr;
}

const llvm::DenseMap<Location, ValueFacts> *
ProgramModel::classInvariantSoFar(const CXXRecordDecl *Class) const {
  const CXXRecordDecl *Built = buildingObjectOf(Class);
  return Built ? InvariantsSoFar.lookup(Built) : nullptr;
}

void ProgramModel::setClassInvariantSoFar(
    const CXXRecordDecl &Class,
    const llvm::DenseMap<Location, ValueFacts> *Facts) {
  ++BuildEpoch;
  if (Facts)
    InvariantsSoFar[Class.getCanonicalDecl()] = Facts;
  else
    InvariantsSoFar.erase(Class.getCanonicalDecl());
}

bool ProgramModel::callsClassUnderConstruction(const CallExpr &Call) const {
  if (Building.empty())
    return false;
  const auto *Member = dyn_cast<CXXMemberCallExpr>(&Call);
  const CXXMethodDecl *Method = Member ? Member->getMethodDecl() : nullptr;
  const Expr *Object = Member ? Member->getImplicitObjectArgument() : nullptr;
  bool Cut = Method && !Method->isStatic() && Object &&
             isa<CXXThisExpr>(Object->IgnoreParenImpCasts()) &&
             buildingObjectOf(Method->getParent());
  BuildCuts += Cut;
  return Cut;
}

//===--- Globals -----------------------------------------------------------===//

namespace {
/// The functions that write each global (assign it, change it in place,
/// take its address or hand it on by non-const reference).
class GlobalWrites : public RecursiveASTVisitor<GlobalWrites> {
public:
  GlobalWrites(const VarDecl &Global, ASTContext &Ctx) : Global(Global), Ctx(Ctx) {}
  bool shouldVisitTemplateInstantiations() const { return true; }
  bool shouldVisitLambdaBody() const { return true; }
  bool TraverseDecl(Decl *D) {
    const FunctionDecl *Saved = Current;
    if (auto *FD = dyn_cast_or_null<FunctionDecl>(D))
      if (FD->doesThisDeclarationHaveABody())
        Current = FD;
    bool R = RecursiveASTVisitor::TraverseDecl(D);
    Current = Saved;
    return R;
  }
  bool VisitDeclRefExpr(DeclRefExpr *Ref) {
    if (Ref->getDecl() != &Global)
      return true;
    if (isWritten(*Ref)) {
      if (!Current)
        Opaque = true;
      else if (!llvm::is_contained(Writers, Current))
        Writers.push_back(Current);
    }
    return true;
  }
  llvm::SmallVector<const FunctionDecl *, 2> Writers;
  bool Opaque = false;

private:
  bool isWritten(const Expr &E) {
    const Expr *Child = &E;
    for (unsigned Depth = 0; Depth < 8; ++Depth) {
      llvm::ArrayRef<DynTypedNode> Parents = userCodeParents(*Child, Ctx);
      const auto *Parent = Parents.empty() ? nullptr : Parents[0].get<Expr>();
      if (!Parent)
        return false;
      if (isa<ImplicitCastExpr, ParenExpr, MemberExpr>(Parent)) {
        if (const auto *Cast = dyn_cast<ImplicitCastExpr>(Parent);
            Cast && Cast->getCastKind() == CK_LValueToRValue)
          return false;
        if (const auto *ME = dyn_cast<MemberExpr>(Parent)) {
          const auto *MD = dyn_cast<CXXMethodDecl>(ME->getMemberDecl());
          if (MD)
            return !MD->isConst() || MD->getName().ends_with("_");
        }
        Child = Parent;
        continue;
      }
      if (const auto *BO = dyn_cast<BinaryOperator>(Parent))
        return BO->isAssignmentOp() && BO->getLHS()->IgnoreParenImpCasts() == Child;
      if (const auto *UO = dyn_cast<UnaryOperator>(Parent))
        return UO->getOpcode() == UO_AddrOf || UO->isIncrementDecrementOp();
      if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Parent))
        return Op->getNumArgs() > 0 &&
               Op->getArg(0)->IgnoreParenImpCasts() == Child &&
               (Op->isAssignmentOp() || Op->getOperator() == OO_Arrow ||
                Op->getOperator() == OO_Subscript);
      if (const auto *Call = dyn_cast<CallExpr>(Parent)) {
        const FunctionDecl *FD = Call->getDirectCallee();
        if (!FD)
          return true;
        for (unsigned I = 0; I < Call->getNumArgs() && I < FD->getNumParams(); ++I)
          if (Call->getArg(I)->IgnoreParenImpCasts() == Child) {
            QualType PT = FD->getParamDecl(I)->getType();
            return (PT->isReferenceType() &&
                    !PT.getNonReferenceType().isConstQualified()) ||
                   isModuleHandleType(PT);
          }
      }
      return false;
    }
    return false;
  }
  const VarDecl &Global;
  ASTContext &Ctx;
  const FunctionDecl *Current = nullptr;
};
} // namespace

ValueFacts ProgramModel::globalFacts(const VarDecl &Global,
                                     const Location &Part) {
  const VarDecl *Key = Global.getCanonicalDecl();
  Location Self = Location::global(Key);
  Location At = Part ? Part.rebased(Self) : Self;
  if (auto It = Globals.find(Key); It != Globals.end())
    return It->second ? It->second->get(At) : ValueFacts();
  Globals[Key] = std::nullopt; // a cycle asks again: unknown
  const VarDecl *Def = Global.getDefinition() ? Global.getDefinition() : &Global;
  if (isSystemHeaderDecl(*Def, Ctx.getSourceManager()))
    return ValueFacts();
  // The initialiser, as a namespace-scope statement runs it: the whole, and
  // the parts it builds (`SensorNorm g_norm{torch::zeros(...), ...}`).
  FlowModel Model(Def, Ctx, *this);
  State Empty;
  Empty.path().Cuda = CudaGuard::Unguarded;
  Empty.path().Grad = GradMode::Enabled;
  QualType T = Def->getType();
  const Expr *Init = Def->getInit();
  bool Default = !Init || (isa<CXXConstructExpr>(Init->IgnoreImplicit()) &&
                           cast<CXXConstructExpr>(Init->IgnoreImplicit())
                                   ->getNumArgs() == 0);
  State Tree = Empty;
  if (Init && !Default) {
    Model.assign(Self, T, Init, Def->getLocation(), Tree);
    ValueFacts Whole = Model.evaluate(Init, Empty);
    if (isDeviceType(T) && !Whole.Device.Value.isKnown())
      Whole.Device = {DeviceValue::symbolic(Def), Def->getLocation()};
    Tree.set(Self, Whole);
  }
  llvm::DenseMap<Location, ValueFacts> Facts;
  for (const Location &L : Tree.tree(Self))
    Facts[L] = Tree.get(L);
  if (!T.isConstQualified() && !Def->isConstexpr()) {
    GlobalWrites Writes(*Key, Ctx);
    for (Decl *D : UserCodeTraversal::userDeclarations(Ctx))
      Writes.TraverseDecl(D);
    bool Any = !Default;
    for (const FunctionDecl *Writer : Writes.Writers) {
      // A writer whose summary is under way asked (it reads the global
      // before it writes it): unknown to it, and not kept, since its write
      // is part of the answer.
      if (InProgress.contains(Writer->getCanonicalDecl())) {
        Globals.erase(Key);
        return ValueFacts();
      }
      const FunctionSummary *S = summary(*Writer);
      llvm::DenseMap<Location, ValueFacts> Written;
      if (S && !Writes.Opaque)
        for (const SummaryEffect &E : S->Effects)
          if (E.Where == Self || E.Where.hasPrefix(Self))
            Written[E.Where] = E.Exit.withoutEntries();
      bool Clobbered =
          S && llvm::any_of(S->Clobbers, [&](const Location &L) {
            return L == Self || L.hasPrefix(Self) || Self.hasPrefix(L);
          });
      if (!S || Writes.Opaque || Written.empty() || Clobbered) {
        Facts.clear();
        Any = true;
        break;
      }
      // A default-constructed global set before use (`init()`) holds what
      // it is set to; a part the writer leaves is as it was, unless the
      // writer replaced the whole.
      bool Whole = Written.count(Self);
      for (auto &[L, F] : Facts)
        if (!Written.count(L) && Whole && L != Self)
          F = ValueFacts();
      for (const auto &[L, F] : Written) {
        auto It = Facts.find(L);
        Facts[L] = Any && It != Facts.end() ? joinFacts(It->second, F)
                   : Any                    ? (Default ? F : ValueFacts())
                                            : F;
      }
      Any = true;
    }
  }
  ValueFacts &Root = Facts[Self];
  if (isDeviceType(T) && !Root.Device.Value.isKnown())
    Root.Device = {DeviceValue::symbolic(Def), Def->getLocation()};
  State Result;
  for (auto &[L, F] : Facts) {
    F.Empty = false;
    if (!F.isUnknown() || L == Self)
      Result.set(L, F);
  }
  ValueFacts Answer = Result.get(At);
  Globals[Key] = std::move(Result);
  return Answer;
}

const FlowAnalysis *ProgramModel::initializerAnalysis(const VarDecl &Global) {
  std::unique_ptr<FlowAnalysis> &Slot = Initializers[&Global];
  if (!Slot) {
    State Start;
    Start.path().Cuda = CudaGuard::Unguarded;
    Start.path().Grad = GradMode::Enabled;
    Slot = FlowAnalysis::runInitializer(Global, *this, Start);
  }
  return Slot && Slot->converged() ? Slot.get() : nullptr;
}

PathFacts ProgramModel::initializerPath(const VarDecl &Global) {
  const FlowAnalysis *A = initializerAnalysis(Global);
  if (!A)
    return PathFacts();
  PathFacts Joined;
  bool First = true;
  for (const State &End : A->endStates()) {
    Joined = First ? End.path() : joinPaths(Joined, End.path());
    First = false;
  }
  return Joined;
}

//===--- Training calls ----------------------------------------------------===//

static bool summaryTrains(const FunctionSummary *S, TrainingCall What) {
  if (What == TrainingCall::PerStep)
    return S && S->TrainsPerCall;
  bool Backward = What != TrainingCall::Step;
  bool Step = What != TrainingCall::Backward;
  return S && ((Backward && S->Backward.isValid()) ||
               (Step && S->Step.isValid()));
}

bool ProgramModel::functionTrains(const FunctionDecl &Callee,
                                  TrainingCall What) {
  return summaryTrains(summary(Callee), What);
}

bool ProgramModel::functionMayTrain(const FunctionDecl &Callee) {
  const FunctionSummary *S = summary(Callee);
  return !S || summaryTrains(S, TrainingCall::BackwardOrStep) ||
         S->MayRunOpaqueBackward;
}

bool ProgramModel::callTrains(const CallExpr &Call, TrainingCall What) {
  bool Backward = What != TrainingCall::Step;
  bool Step = What != TrainingCall::Backward;
  if ((Backward && isBackwardCall(Call, options())) ||
      (Step && isOptimizerStepCall(Call, options())))
    return true;
  auto Trains = [&](const FunctionSummary *S) { return summaryTrains(S, What); };
  if (const FunctionSummary *S = summaryForCall(Call))
    return Trains(S);
  // A virtual call trains when every override that may run does.
  auto Dispatched = dispatchedSummaries(Call);
  return !Dispatched.empty() && llvm::all_of(Dispatched, [&](const auto &D) {
           return Trains(D.second);
         });
}

static bool carriesTensor(QualType T, unsigned Depth) {
  if (T.isNull() || Depth > 3)
    return false;
  T = T.getNonReferenceType();
  if (T->isPointerType())
    T = T->getPointeeType();
  T = T.getCanonicalType();
  if (isTensorType(T))
    return true;
  const auto *RD = T->getAsCXXRecordDecl();
  if (!RD)
    return false;
  if (const auto *Spec = dyn_cast<ClassTemplateSpecializationDecl>(RD))
    for (const TemplateArgument &A : Spec->getTemplateArgs().asArray()) {
      llvm::ArrayRef<TemplateArgument> Args =
          A.getKind() == TemplateArgument::Pack ? A.pack_elements()
                                                : llvm::ArrayRef(A);
      for (const TemplateArgument &Arg : Args)
        if (Arg.getKind() == TemplateArgument::Type &&
            carriesTensor(Arg.getAsType(), Depth + 1))
          return true;
    }
  if (!RD->hasDefinition() || RD->isLambda())
    return false;
  std::string Q = RD->getQualifiedNameAsString();
  if (llvm::StringRef(Q).starts_with("std::"))
    return false;
  if (llvm::StringRef(Q).starts_with("torch::data::Example"))
    return true;
  for (const FieldDecl *F : RD->getDefinition()->fields())
    if (carriesTensor(F->getType(), Depth + 1))
      return true;
  return false;
}

bool ProgramModel::mayTrain(const CallExpr &Call) {
  if (Call.isTypeDependent())
    return false; // a template's pattern: its instantiations decide
  if (callTrains(Call, TrainingCall::BackwardOrStep) || isGradientCall(Call))
    return true;
  const FunctionDecl *FD = Call.getDirectCallee();
  bool Opaque = false;
  if (!FD) {
    Opaque = true; // a function pointer
  } else if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&Call);
             Op && Op->getOperator() == OO_Call && isa<CXXMethodDecl>(FD) &&
             cast<CXXMethodDecl>(FD)->getParent()->getQualifiedNameAsString() ==
                 "std::function") {
    Opaque = true; // a type-erased callable
  } else if (isLibraryFunction(*FD) ||
             (FD->getIdentifier() && FD->getName() == "forward")) {
    // LibTorch runs no backward of the user's; a module's forward builds a
    // graph, it does not run backward.
    return false;
  } else if (const FunctionSummary *S = summaryForCall(Call)) {
    return S->MayRunOpaqueBackward;
  } else {
    Opaque = true;
  }
  if (!Opaque)
    return false;
  for (const Expr *Arg : Call.arguments())
    if (carriesTensor(Arg->getType(), 0))
      return true;
  if (const auto *Member = dyn_cast<CXXMemberCallExpr>(&Call))
    if (const Expr *Obj = Member->getImplicitObjectArgument())
      return carriesTensor(Obj->getType(), 0);
  return false;
}

//===--- Device literals ---------------------------------------------------===//

DeviceLiteralUse ProgramModel::deviceLiteralUse(const Expr &Literal,
                                                const Decl &Owner) {
  std::unique_ptr<ParentMap> &PM = ParentMaps[&Owner];
  if (!PM) {
    const auto *Function = dyn_cast<FunctionDecl>(&Owner);
    const auto *Var = dyn_cast<VarDecl>(&Owner);
    Stmt *Root = Function ? Function->getBody()
                          : Var ? const_cast<Expr *>(Var->getInit()) : nullptr;
    PM = std::make_unique<ParentMap>(Root);
    if (const auto *Ctor = dyn_cast_or_null<CXXConstructorDecl>(Function))
      for (const CXXCtorInitializer *Init : Ctor->inits()) {
        Expr *E = Init->getInit();
        if (const auto *Default = dyn_cast_or_null<CXXDefaultInitExpr>(E))
          E = const_cast<Expr *>(Default->getExpr());
        if (E)
          PM->addStmt(E);
      }
  }
  return classifyDeviceLiteralUse(Literal, *PM, options());
}

} // namespace clang::tidy::torch

namespace clang::tidy::torch {

//===--- Graphs across functions -------------------------------------------===//

/// The user functions of the TU that the model analyses.
static std::vector<const FunctionDecl *> analysedFunctions(ProgramModel &P) {
  std::vector<const FunctionDecl *> Out;
  for (const auto &Entry : P.callGraph())
    if (const auto *FD = dyn_cast_or_null<FunctionDecl>(Entry.first)) {
      const FunctionDecl *Def = nullptr;
      if (FD->hasBody(Def) && Def && P.isAnalyzable(*Def))
        Out.push_back(Def);
    }
  llvm::sort(Out, [](const FunctionDecl *A, const FunctionDecl *B) {
    return A->getLocation().getRawEncoding() < B->getLocation().getRawEncoding();
  });
  return Out;
}

const llvm::DenseSet<const Stmt *> &ProgramModel::graphsBackpropagated() {
  if (!Backpropagated) {
    Backpropagated.emplace();
    for (const FunctionDecl *F : analysedFunctions(*this))
      if (const FlowAnalysis *A = analysis(*F))
        for (const State &S : A->endStates())
          Backpropagated->insert(S.path().GraphsBackpropagated.begin(),
                                 S.path().GraphsBackpropagated.end());
  }
  return *Backpropagated;
}

const llvm::DenseSet<const Stmt *> &
ProgramModel::graphsReturnedBy(const FunctionDecl &F) {
  auto [It, New] = Returned.try_emplace(&F);
  if (!New)
    return It->second;
  llvm::DenseSet<const Stmt *> &Out = It->second;
  if (const FunctionSummary *S = summary(F))
    for (const SummaryEffect &R : S->Returns)
      Out.insert(R.Exit.GraphSources.begin(), R.Exit.GraphSources.end());
  // The summary starts from "whatever each entry value is"; with its
  // callers' facts (a parameter on a graph) the returned value holds the
  // graphs the reporting analysis sees.
  if (const FlowAnalysis *A = analysis(F))
    A->replay([&](const Stmt &St, const State &Before) {
      if (const auto *Ret = dyn_cast<ReturnStmt>(&St))
        if (const Expr *V = Ret->getRetValue()) {
          ValueFacts Value = A->model().evaluate(V, Before);
          Out.insert(Value.GraphSources.begin(), Value.GraphSources.end());
          // And its parts: a container's elements, a struct's fields.
          if (Location L = A->model().locationOf(V))
            for (const Location &Part : Before.tree(L)) {
              ValueFacts P = Before.get(Part);
              Out.insert(P.GraphSources.begin(), P.GraphSources.end());
            }
        }
    });
  return Out;
}

/// Whether \p S assigns the variable \p P (`window = torch::cat(...)`).
static bool assigns(const Stmt *S, const ParmVarDecl &P) {
  if (!S)
    return false;
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(S);
      Op && Op->isAssignmentOp() && Op->getNumArgs() == 2)
    if (const auto *Ref =
            dyn_cast<DeclRefExpr>(Op->getArg(0)->IgnoreParenImpCasts());
        Ref && Ref->getDecl() == &P)
      return true;
  for (const Stmt *Child : S->children())
    if (assigns(Child, P))
      return true;
  return false;
}

/// Whether what \p F leaves in its parameter \p P at \p Depth reaches the
/// caller: through a reference or a pointer, a shared module, or a tensor
/// handle passed by value that \p F never rebinds (its in-place updates
/// are the caller's tensor's).
static bool reachesCaller(const ParmVarDecl &P, unsigned Depth,
                          const FunctionDecl &F) {
  QualType T = P.getType();
  if (T->isReferenceType() || T->isPointerType() || isModuleHandleType(T))
    return true;
  return Depth == 0 && isTensorType(T) && !assigns(F.getBody(), P);
}

const llvm::DenseSet<const Stmt *> &
ProgramModel::graphsKeptBy(const FunctionDecl &F) {
  auto [It, New] = Kept.try_emplace(&F);
  if (!New)
    return It->second;
  llvm::DenseSet<const Stmt *> &Out = It->second;
  Out = graphsReturnedBy(F);
  if (const FlowAnalysis *A = analysis(F))
    for (const State &S : A->endStates()) {
      Out.insert(S.path().GraphsEscaped.begin(), S.path().GraphsEscaped.end());
      S.forEach([&](const Location &L, const ValueFacts &V) {
        const auto *P = dyn_cast_or_null<ParmVarDecl>(L.Root);
        bool Outlives = L.Kind == Location::This || L.Kind == Location::Global ||
                        (L.Kind == Location::Local && P &&
                         reachesCaller(*P, L.Depth, F));
        if (Outlives)
          Out.insert(V.GraphSources.begin(), V.GraphSources.end());
      });
    }
  return Out;
}

std::pair<int64_t, const Expr *> ProgramModel::largestCountProven() {
  if (!LargestCount) {
    LargestCount.emplace(0, nullptr);
    for (const FunctionDecl *F : analysedFunctions(*this))
      if (const FlowAnalysis *A = summaryAnalysis(*F)) {
        auto [Count, Proof] = A->largestCountProven();
        if (Count > LargestCount->first)
          *LargestCount = {Count, Proof};
      }
  }
  return *LargestCount;
}

} // namespace clang::tidy::torch
