//===--- ClassState.cpp - torch-tidy --------------------------------------===//

#include "ClassState.h"
#include "ProgramModel.h"
#include "FlowAnalysis.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "support/UserCodeParents.h"
#include "support/UserCodeTraversal.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "llvm/ADT/ScopeExit.h"

namespace clang::tidy::torch {

namespace {

bool isTrackedMember(const FieldDecl &F) {
  QualType T = F.getType();
  if (T->isReferenceType())
    return false;
  if (isTorchValueType(T) || isScalarType(T) ||
      containerRecord(T) || isCallableType(T) || isOwningPointer(T))
    return true;
  // An object of the program's own (a sampler, a config): its parts.
  const CXXRecordDecl *RD = T->getAsCXXRecordDecl();
  return RD && RD->hasDefinition() && !RD->isLambda() &&
         !RD->isInStdNamespace() && !isTorchNamespaceDecl(*RD);
}

/// Whether \p E, a member expression, is written (or, for a module handle,
/// used to move its module) by its parent.
bool isWrite(const Expr &E, ASTContext &Ctx) {
  llvm::ArrayRef<DynTypedNode> Parents = userCodeParents(E, Ctx);
  const Stmt *Parent = Parents.empty() ? nullptr : Parents[0].get<Stmt>();
  const Expr *Child = &E;
  // Through implicit casts and parentheses.
  while (Parent && isa<ImplicitCastExpr, ParenExpr>(Parent)) {
    Child = cast<Expr>(Parent);
    Parents = userCodeParents(*Parent, Ctx);
    Parent = Parents.empty() ? nullptr : Parents[0].get<Stmt>();
  }
  if (!Parent)
    return false;
  if (const auto *BO = dyn_cast<BinaryOperator>(Parent))
    return BO->isAssignmentOp() && BO->getLHS()->IgnoreParenImpCasts() == &E;
  if (const auto *UO = dyn_cast<UnaryOperator>(Parent))
    return UO->getOpcode() == UO_AddrOf || UO->isIncrementDecrementOp();
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Parent)) {
    if (Op->getNumArgs() == 0 || Op->getArg(0)->IgnoreParenImpCasts() != &E)
      return false;
    // `x = ...`, `x += ...`, and `holder->...` on a module handle.
    return Op->isAssignmentOp() || Op->getOperator() == OO_Arrow;
  }
  if (const auto *Member = dyn_cast<MemberExpr>(Parent)) {
    // `x.method()`: a non-const method, or an in-place tensor method.
    const auto *MD = dyn_cast<CXXMethodDecl>(Member->getMemberDecl());
    return MD && (!MD->isConst() || MD->getName().ends_with("_") ||
                  MD->getName() == "to");
  }
  if (const auto *Call = dyn_cast<CallExpr>(Parent)) {
    const FunctionDecl *FD = Call->getDirectCallee();
    if (!FD)
      return true;
    unsigned Offset = isa<CXXOperatorCallExpr>(Call) && isa<CXXMethodDecl>(FD);
    for (unsigned I = Offset; I < Call->getNumArgs(); ++I)
      if (Call->getArg(I) == Child && I - Offset < FD->getNumParams()) {
        QualType PT = FD->getParamDecl(I - Offset)->getType();
        return (PT->isReferenceType() &&
                !PT.getNonReferenceType().isConstQualified()) ||
               isModuleHandleType(PT);
      }
  }
  return false;
}

/// Members written through an object other than `*this`: a public member
/// assigned by a caller, a module handle moved from outside.
class ForeignWriteFinder : public RecursiveASTVisitor<ForeignWriteFinder> {
public:
  ForeignWriteFinder(ASTContext &Ctx, llvm::DenseSet<const FieldDecl *> &Out)
      : Ctx(Ctx), Out(Out) {}
  bool shouldVisitTemplateInstantiations() const { return true; }
  bool shouldVisitLambdaBody() const { return true; }
  bool VisitMemberExpr(MemberExpr *ME) {
    const auto *Field = dyn_cast<FieldDecl>(ME->getMemberDecl());
    if (!Field || !isTrackedMember(*Field) ||
        isa<CXXThisExpr>(ME->getBase()->IgnoreParenImpCasts()))
      return true;
    if (isWrite(*ME, Ctx))
      Out.insert(Field);
    return true;
  }

  /// `Config{mode}`, `ctx_{cfg.amp}`: an aggregate's initialiser list sets
  /// the fields it names, whatever their default initialisers say.
  bool VisitInitListExpr(InitListExpr *List) {
    const InitListExpr *Semantic =
        List->isSemanticForm() ? List : List->getSemanticForm();
    const CXXRecordDecl *RD =
        Semantic ? Semantic->getType()->getAsCXXRecordDecl() : nullptr;
    if (!RD || !RD->hasDefinition() || RD->isUnion())
      return true;
    unsigned Index = RD->getDefinition()->getNumBases();
    for (const FieldDecl *Field : RD->getDefinition()->fields()) {
      if (Field->isUnnamedBitField())
        continue;
      const Expr *Init =
          Index < Semantic->getNumInits() ? Semantic->getInit(Index) : nullptr;
      ++Index;
      if (Init && !isa<ImplicitValueInitExpr, CXXDefaultInitExpr>(Init) &&
          isTrackedMember(*Field))
        Out.insert(Field);
    }
    return true;
  }

private:
  ASTContext &Ctx;
  llvm::DenseSet<const FieldDecl *> &Out;
};

/// Whether \p L lies in one of \p Members of `*this`.
bool isMemberOf(const Location &L, llvm::ArrayRef<const FieldDecl *> Members) {
  return L.Kind == Location::This && L.Depth >= 1 &&
         llvm::is_contained(Members, Selector::fromRaw(L.Path[0]).asField());
}

} // namespace

const llvm::DenseSet<const FieldDecl *> &
ProgramModel::foreignWrittenMembers() {
  if (!ForeignWritesFound) {
    ForeignWritesFound = true;
    ForeignWriteFinder Finder(Ctx, ForeignWrites);
    for (Decl *D : UserCodeTraversal::userDeclarations(Ctx))
      Finder.TraverseDecl(D);
  }
  return ForeignWrites;
}

/// The device members a constructor stores its device parameters in
/// (`device_(device)`): the parameter's symbolic device is the member's
/// once the constructor has returned.
using DeviceHolders = llvm::SmallDenseMap<const ParmVarDecl *, const FieldDecl *, 2>;

static DeviceHolders deviceHoldersOf(const FunctionSummary &Ctor) {
  DeviceHolders Out;
  for (const SummaryEffect &E : Ctor.Effects) {
    const FieldDecl *Member = E.Where.Kind == Location::This && E.Where.Depth == 1
                                  ? E.Where.last().asField()
                                  : nullptr;
    if (!Member || !isDeviceType(Member->getType()))
      continue;
    const auto *P = dyn_cast_or_null<ParmVarDecl>(E.Exit.Device.Entry);
    if (!P && E.Exit.Device.Value.isSymbolic())
      P = dyn_cast_or_null<ParmVarDecl>(E.Exit.Device.Value.holder());
    if (P)
      Out.try_emplace(P, Member);
  }
  return Out;
}

/// The callables a callable parameter held at entry (a hook stored by a
/// constructor or a setter): those every caller passes, as the callers'
/// context says, or as every call of the TU writes them when the class is
/// the main file's (no other TU sees it) and the context is not known yet
/// (the caller's analysis is under way).
static void resolveCallables(ValueFacts &F, const FunctionDecl &Function,
                             const EntryContext &Context,
                             ProgramModel &Program) {
  const ValueFacts::ParameterPart Part = F.CallablesAtEntry;
  if (!Part || Part.Field || Context.Root || !F.Callables.empty() ||
      F.CallablesKnown)
    return;
  llvm::SmallVector<const FunctionDecl *, 2> Callables;
  if (const ValueFacts *Known =
          Context.Entry.lookup(Location::local(Part.Param));
      Known && Known->CallablesKnown) {
    Callables.assign(Known->Callables.begin(), Known->Callables.end());
  } else if (auto Written = Program.writtenCallables(
                 Function, Part.Param->getFunctionScopeIndex())) {
    Callables = std::move(*Written);
  } else {
    return;
  }
  F.Callables.assign(Callables.begin(), Callables.end());
  F.CallablesKnown = true;
  F.CallablesOnThis = false;
  F.CallablesAtEntry = {};
}

/// Whether \p Context says what every caller passes: not a root, and no
/// caller left out (one under analysis, which would join its value later).
static bool saysEveryCaller(const EntryContext &Context) {
  return !Context.Root && Context.Complete;
}

/// \p F with every entry value replaced by what \p Context says of it; a
/// device parameter's symbolic device by what the callers pass, or else by
/// the member that holds it.
static ValueFacts resolveEntries(const ValueFacts &F, const FunctionDecl &Ctor,
                                 const EntryContext &Context,
                                 const DeviceHolders &Holders,
                                 ProgramModel &Program) {
  ValueFacts R = F;
  if (!R.Device.Entry && R.Device.Value.isSymbolic())
    if (const auto *P = dyn_cast_or_null<ParmVarDecl>(R.Device.Value.holder())) {
      const ValueFacts *Known =
          saysEveryCaller(Context) ? Context.Entry.lookup(Location::local(P))
                                   : nullptr;
      if (Known && Known->Device.Value.isKnown())
        R.Device = {Known->Device.Value, R.Device.Origin};
      else if (const FieldDecl *Member = Holders.lookup(P))
        R.Device = {DeviceValue::symbolic(Member), R.Device.Origin};
      else
        R.Device = {};
    }
  auto Resolve = [&](auto &Fact, auto Member) {
    if (!Fact.Entry)
      return;
    Location L = isa<FieldDecl>(Fact.Entry)
                     ? Location::member(cast<FieldDecl>(Fact.Entry))
                     : Location::local(Fact.Entry);
    const ValueFacts *Known =
        saysEveryCaller(Context) ? Context.Entry.lookup(L) : nullptr;
    using SourcedT = std::decay_t<decltype(Fact)>;
    Fact = Known ? (*Known).*Member : SourcedT();
    Fact.Entry = nullptr;
  };
  Resolve(R.Device, &ValueFacts::Device);
  Resolve(R.Pin, &ValueFacts::Pin);
  Resolve(R.Graph, &ValueFacts::Graph);
  Resolve(R.Mode, &ValueFacts::Mode);
  resolveCallables(R, Ctor, Context, Program);
  return R;
}

/// \p V without the graphs that a method's accumulations add only when the
/// callers hand it a value on a graph (`v_.push_back(loss)` for a
/// parameter): the class state holds what the methods leave whatever they
/// are given.
static void dropConditionalGraphs(ValueFacts &V, const FlowAnalysis &A) {
  llvm::erase_if(V.GraphSources, [&](const Stmt *Source) {
    Accumulation Added;
    if (!A.model().matchAccumulation(*Source, Added))
      return false;
    std::optional<State> Before = A.stateBefore(*Source);
    return Before && A.model().evaluate(Added.Value, *Before).Graph.Value !=
                         GraphState::InGraph;
  });
}

/// Analyses \p Method from \p Entry and joins what it leaves in the members
/// into \p Facts (new parts of members become keys).
template <typename DropFn>
static void joinMethodExit(const CXXMethodDecl &Method,
                           llvm::ArrayRef<const FieldDecl *> Members,
                           const State &Entry, ProgramModel &Program,
                           llvm::DenseMap<Location, ValueFacts> &Facts,
                           llvm::SmallVectorImpl<Location> &Keys, DropFn Drop) {
  if (isa<CXXConstructorDecl, CXXDestructorDecl>(Method) || Method.isStatic() ||
      Method.isDeleted() || Method.isCopyAssignmentOperator() ||
      Method.isMoveAssignmentOperator())
    return;
  const FunctionDecl *Body = nullptr;
  // A member of a class template's specialization that nothing
  // instantiated never runs on its objects.
  if (!Method.hasBody(Body) && Method.getTemplateInstantiationPattern() &&
      !Method.isDefined())
    return;
  if (!Method.hasBody(Body) || !Body || !Program.isAnalyzable(*Body)) {
    // A member function whose body is unknown may change any member it
    // can: every one, unless it is const (which still moves modules).
    if (Method.isImplicit())
      return;
    for (const FieldDecl *F : Members)
      if (!Method.isConst() || isModuleHandleType(F->getType()))
        Drop(F);
    return;
  }
  State MethodEntry = Entry;
  for (const ParmVarDecl *P : Body->parameters()) {
    ValueFacts F = ValueFacts::atEntry(*P);
    // A hook a setter stores: what its callers pass.
    if (isCallableType(P->getType().getNonReferenceType())) {
      F.CallablesAtEntry = {P, nullptr};
      resolveCallables(F, *Body, Program.entryContext(*Body), Program);
    }
    MethodEntry.set(Location::local(P), F);
  }
  std::unique_ptr<FlowAnalysis> A = Program.analyse(*Body, MethodEntry);
  if (!A || !A->converged()) {
    for (const FieldDecl *F : Members)
      Drop(F);
    return;
  }
  const State *Exit = A->exitState();
  if (!Exit)
    return; // never returns
  llvm::SmallVector<Location, 8> Changed;
  Exit->forEach([&](const Location &L, const ValueFacts &) {
    if (isMemberOf(L, Members))
      Changed.push_back(L);
  });
  for (const Location &L : Keys)
    if (!llvm::is_contained(Changed, L))
      Changed.push_back(L);
  llvm::sort(Changed);
  for (const Location &L : Changed) {
    ValueFacts After = Exit->get(L).withoutEntries();
    dropConditionalGraphs(After, *A);
    if (After == Entry.get(L))
      continue;
    if (!llvm::is_contained(Keys, L)) {
      Keys.push_back(L);
      Facts[L] = After;
      continue;
    }
    Facts[L] = joinFacts(Facts[L], After);
  }
}

llvm::SmallVector<const CXXRecordDecl *, 2>
classWithBases(const CXXRecordDecl &Class) {
  llvm::SmallVector<const CXXRecordDecl *, 2> Out{&Class};
  for (unsigned I = 0; I < Out.size() && Out.size() < 8; ++I) {
    const CXXRecordDecl *RD = Out[I]->getDefinition();
    if (!RD)
      continue;
    for (const CXXBaseSpecifier &Base : RD->bases())
      if (const CXXRecordDecl *B = Base.getType()->getAsCXXRecordDecl();
          B && !Base.isVirtual() && B->hasDefinition() &&
          !llvm::is_contained(Out, B->getDefinition()))
        Out.push_back(B->getDefinition());
  }
  return Out;
}

llvm::SmallVector<const FieldDecl *, 8>
fieldsWithBases(const CXXRecordDecl &Class) {
  llvm::SmallVector<const FieldDecl *, 8> Out;
  for (const CXXRecordDecl *RD : classWithBases(Class))
    if (RD->hasDefinition())
      Out.append(RD->getDefinition()->field_begin(),
                 RD->getDefinition()->field_end());
  return Out;
}

/// The member functions that may run on an object of \p Class: its own and
/// those of its bases that no class below overrides (a pure virtual one
/// never runs).
static llvm::SmallVector<const CXXMethodDecl *, 16>
methodsOfObject(const CXXRecordDecl &Class) {
  llvm::SmallVector<const CXXMethodDecl *, 16> Out;
  llvm::SmallPtrSet<const CXXMethodDecl *, 8> Overridden;
  for (const CXXRecordDecl *RD : classWithBases(Class))
    for (const CXXMethodDecl *Method : RD->methods()) {
      for (const CXXMethodDecl *Base : Method->overridden_methods())
        Overridden.insert(Base->getCanonicalDecl());
      if (!Method->isPureVirtual() &&
          !Overridden.contains(Method->getCanonicalDecl()))
        Out.push_back(Method);
    }
  return Out;
}

/// Whether one of \p Methods returns \p Member by non-const reference or
/// by pointer (`std::vector<Hook> &hooks() { return hooks_; }`): its callers
/// may fill it.
static bool handsOut(llvm::ArrayRef<const CXXMethodDecl *> Methods,
                     const FieldDecl &Member) {
  auto Returns = [&](const Stmt *S, QualType T, auto &Self) -> bool {
    if (!S)
      return false;
    if (const auto *Return = dyn_cast<ReturnStmt>(S);
        Return && Return->getRetValue()) {
      const Expr *Value = Return->getRetValue()->IgnoreParenImpCasts();
      bool Writable = T->isLValueReferenceType() &&
                      !T.getNonReferenceType().isConstQualified();
      if (const auto *UO = dyn_cast<UnaryOperator>(Value);
          UO && UO->getOpcode() == UO_AddrOf) {
        Value = UO->getSubExpr()->IgnoreParenImpCasts();
        Writable = T->isPointerType() && !T->getPointeeType().isConstQualified();
      }
      const auto *ME = dyn_cast<MemberExpr>(Value);
      return Writable && ME && ME->getMemberDecl() == &Member;
    }
    for (const Stmt *Child : S->children())
      if (Self(Child, T, Self))
        return true;
    return false;
  };
  return llvm::any_of(Methods, [&](const CXXMethodDecl *Method) {
    const FunctionDecl *Body = nullptr;
    return Method->hasBody(Body) &&
           Returns(Body->getBody(), Method->getReturnType(), Returns);
  });
}

ClassState computeClassState(const CXXRecordDecl &Class,
                             ProgramModel &Program) {
  ClassState Result;
  const CXXRecordDecl *Def = Class.getDefinition();
  if (!Def || Def->isDependentContext())
    return Result;
  // A module's own submodules, parameters and buffers move with every
  // `to()` of the module, from anywhere.
  if (isModuleHandleType(Program.context().getRecordType(Def)))
    return Result;
  llvm::SmallVector<const FieldDecl *, 8> Members;
  for (const FieldDecl *F : fieldsWithBases(*Def))
    if (isTrackedMember(*F))
      Members.push_back(F);
  if (Members.empty())
    return Result;

  // 1. What every constructor establishes: its summary's effects on the
  // members, its parameters as its callers pass them. A constructor without
  // a known body proves nothing.
  bool AnyConstructor = false;
  llvm::DenseMap<Location, ValueFacts> Facts;
  llvm::SmallVector<Location, 8> Keys;
  for (const CXXConstructorDecl *Declared : Def->ctors()) {
    if (Declared->isCopyOrMoveConstructor() || Declared->isDeleted())
      continue;
    // An implicit constructor that nothing uses was never defined.
    if (Declared->isImplicit() && !Declared->hasBody())
      continue;
    const CXXConstructorDecl *Ctor = constructorThatRuns(Declared);
    const FunctionSummary *Summary = Program.summary(*Ctor);
    if (!Summary)
      return Result;
    const EntryContext &Callers = Program.entryContext(*Ctor);
    Result.Provisional |= !Callers.Root && !Callers.Complete;
    // The constants every caller passes for what it stores (`ctx_{cfg.amp}`
    // where every caller's config says Fp16).
    llvm::SmallVector<std::pair<Location, int64_t>, 2> Constants;
    if (saysEveryCaller(Callers))
      for (const Location &In : Program.decidingInputs(*Ctor))
        if (In.Kind == Location::Local)
          if (std::optional<int64_t> K = Callers.Entry.get(In).Scalar.Known)
            Constants.push_back({In, *K});
    if (!Constants.empty())
      if (const FunctionSummary *Known =
              Program.summaryWithConstants(*Ctor, Constants))
        Summary = Known;
    llvm::DenseMap<Location, ValueFacts> Established;
    DeviceHolders Holders = deviceHoldersOf(*Summary);
    for (const SummaryEffect &E : Summary->Effects)
      if (isMemberOf(E.Where, Members)) {
        Established[E.Where] = resolveEntries(E.Exit, *Ctor, Callers, Holders, Program);
        if (!llvm::is_contained(Keys, E.Where))
          Keys.push_back(E.Where);
      }
    for (const Location &L : Keys) {
      ValueFacts Here = Established.lookup(L);
      Facts[L] = AnyConstructor ? joinFacts(Facts[L], Here) : Here;
    }
    AnyConstructor = true;
  }
  if (!AnyConstructor) {
    // No constructor was ever defined (nothing builds the class here, or an
    // aggregate's initialiser lists do): what the members' own initialisers
    // say, where no list sets them (below), and what the methods change.
    for (const FieldDecl *F : Members)
      if (const Expr *Init = F->getInClassInitializer()) {
        FlowModel Model(F, Program.context(), Program);
        State Start;
        Start.path().Cuda = CudaGuard::Unguarded;
        Start.path().Grad = GradMode::Enabled;
        ValueFacts V = Model.evaluate(Init, Start).withoutEntries();
        if (V.isUnknown())
          continue;
        Facts[Location::member(F)] = V;
        Keys.push_back(Location::member(F));
      }
  }

  // 2. Other member functions keep those facts or change them: each is
  // analysed from them, and a member it leaves otherwise is joined. A call of
  // one method from another leaves the facts so far; while that was used and
  // the facts grew, the methods run again from them.
  const llvm::DenseMap<Location, ValueFacts> *Published = &Facts;
  Program.setClassInvariantSoFar(*Def, Published);
  auto Unpublish = llvm::make_scope_exit(
      [&] { Program.setClassInvariantSoFar(*Def, nullptr); });
  const llvm::DenseSet<const FieldDecl *> &Foreign =
      Program.foreignWrittenMembers();
  auto Drop = [&](const FieldDecl *F) {
    for (const Location &L : Keys)
      if (Selector::fromRaw(L.Path[0]).asField() == F)
        Facts[L] = ValueFacts();
  };
  for (const FieldDecl *F : Members)
    if (Foreign.contains(F))
      Drop(F);
  // What the methods leave in a member written from outside the class is
  // not all it may hold: only the others are followed through them.
  llvm::SmallVector<const FieldDecl *, 8> Own;
  for (const FieldDecl *F : Members)
    if (!Foreign.contains(F))
      Own.push_back(F);
  constexpr unsigned MaxRounds = 4;
  for (unsigned Round = 0;; ++Round) {
    // The facts so far are new each round: what was computed from the last
    // round's is not reused (ProgramModel::SummariesThisBuild).
    Program.setClassInvariantSoFar(*Def, Published);
    State Entry;
    for (const Location &L : Keys)
      Entry.set(L, Facts.lookup(L));
    llvm::DenseMap<Location, ValueFacts> Before = Facts;
    unsigned CutsBefore = Program.buildCuts();
    for (const CXXMethodDecl *Method : methodsOfObject(*Def))
      joinMethodExit(*Method, Own, Entry, Program, Facts, Keys, Drop);
    bool UsedOtherMethods = Program.buildCuts() != CutsBefore;
    bool Grew = false;
    for (const Location &L : Keys)
      Grew |= !(Facts.lookup(L) == Before.lookup(L));
    if (!UsedOtherMethods || !Grew)
      break;
    if (Round + 1 == MaxRounds) {
      // Not settled: what still changes is not known.
      for (const Location &L : Keys)
        if (!(Facts.lookup(L) == Before.lookup(L)))
          Facts[L] = ValueFacts();
      break;
    }
  }
  for (const Location &L : Keys) {
    ValueFacts V = Facts[L];
    // A member bound to a caller's module has no mode of the class's: the
    // caller switches it between the methods' calls.
    if (const FieldDecl *F = Selector::fromRaw(L.Path[0]).asField();
        F && Program.isBoundByConstructor(*F))
      V.Mode = {};
    // A container that no method fills stays empty, unless one hands it
    // out; an undefined tensor member is only unknown.
    if (V.Empty && (!L.isElement() ||
                    handsOut(methodsOfObject(*Def),
                             *Selector::fromRaw(L.Path[0]).asField())))
      continue;
    if (!V.isUnknown())
      Result.Members[L] = V;
  }
  return Result;
}

} // namespace clang::tidy::torch
