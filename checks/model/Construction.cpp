//===--- Construction.cpp - torch-tidy ------------------------------------===//
//
// FlowModel at an object's construction and destruction: the object a
// constructor builds (its summary, the members it leaves
// default-constructed, an autocast guard it switches), what it does to the
// module handles it is handed, and what its destructor does where its
// scope ends.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "ClassState.h"
#include "ProgramModel.h"
#include "Summary.h"
#include "api/Autocast.h"
#include "api/StdLibrary.h"
#include "api/TorchApi.h"
#include "api/TorchMatchers.h"
#include "api/Training.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

/// The members of \p Object that a constructor of \p Class leaves alone
/// (no initialiser in the class or the constructor): default-constructed,
/// empty tensors and containers.
static void defaultConstructMembers(const CXXConstructorDecl &Ctor,
                                    const Location &Object, State &St) {
  llvm::SmallPtrSet<const FieldDecl *, 8> Initialised;
  for (const CXXCtorInitializer *Init : Ctor.inits())
    if (Init->isWritten() && Init->getMember())
      Initialised.insert(Init->getMember());
  ValueFacts Nothing;
  Nothing.Empty = true;
  for (const FieldDecl *Field : Ctor.getParent()->fields()) {
    if (Field->hasInClassInitializer() || Initialised.contains(Field))
      continue;
    Location Member = Object.child(Selector::field(Field));
    QualType Type = Field->getType();
    if (containerRecord(Type) || isTensorArrayType(Type))
      St.set(Member.child(Selector::element()), Nothing);
    else if (isTensorType(Field->getType()))
      St.set(Member, Nothing);
  }
}

/// A member type that can share a module with the caller's handle: a
/// holder, a shared_ptr of a module, a pointer or reference to one.
static bool canShareModule(QualType T) {
  if (isSharedModuleHandleType(T))
    return true;
  QualType Pointee = T->getPointeeType();
  return !Pointee.isNull() && isModuleHandleType(Pointee);
}

static bool memberMayKeepModule(const FieldDecl &Field,
                                const FunctionSummary &Summary,
                                const ParmVarDecl &Param, bool Defaulted);

/// Whether the object that \p Ctor builds may keep the module that \p Param
/// hands it: it has a member that can share a module, and the summary does
/// not prove that every such member ends on facts of its own (a clone moved
/// elsewhere keeps nothing of the caller's; `net_(net)` keeps the module).
static bool mayKeepModule(const CXXConstructorDecl &Ctor,
                          const FunctionSummary &Summary,
                          const ParmVarDecl &Param) {
  const CXXRecordDecl *Class = Ctor.getParent();
  for (const CXXBaseSpecifier &Base : Class->bases()) {
    const CXXRecordDecl *B = Base.getType()->getAsCXXRecordDecl();
    if (!B || !B->hasDefinition() || !B->field_empty() ||
        B->getNumBases() > 0)
      if (!isModuleHandleType(Base.getType()))
        return true; // members of a base this does not look into
  }
  for (const FieldDecl *Field : Class->fields())
    if (canShareModule(Field->getType()) &&
        memberMayKeepModule(*Field, Summary, Param, /*Defaulted=*/false))
      return true;
  return false;
}

/// Whether \p Field may hold the module \p Param hands the constructor
/// whose summary is \p Summary when it returns: it ends on facts that are
/// unknown or the parameter's. \p Defaulted: a member the constructor does
/// not write is default-constructed (null), else unknown.
static bool memberMayKeepModule(const FieldDecl &Field,
                                const FunctionSummary &Summary,
                                const ParmVarDecl &Param, bool Defaulted) {
  auto Mentions = [&](const ValueFacts &V) {
    for (const ValueDecl *D : {V.Device.Entry, V.Device.AlsoEntry, V.Pin.Entry,
                               V.Graph.Entry, V.Mode.Entry})
      if (D == &Param)
        return true;
    return false;
  };
  Location Member = Location::member(&Field);
  if (llvm::is_contained(Summary.Clobbers, Member))
    return true;
  const SummaryEffect *Effect = nullptr;
  for (const SummaryEffect &E : Summary.Effects)
    if (E.Where == Member)
      Effect = &E;
  if (!Effect)
    return !Defaulted;
  return Effect->Exit.withoutEntries().isUnknown() || Mentions(Effect->Exit);
}

bool FlowModel::keepsModulesOnlyBound(const CXXConstructExpr &E,
                                      const CXXConstructorDecl &Ctor,
                                      const FunctionSummary &Summary,
                                      const Location &Object,
                                      unsigned Argument) const {
  const auto *Var = Object.Kind == Location::Local && !Object.Depth
                        ? dyn_cast_or_null<VarDecl>(Object.Root)
                        : nullptr;
  auto It = Var ? ObjectConstructions.find(Var) : ObjectConstructions.end();
  if (It == ObjectConstructions.end() || It->second != &E)
    return false;
  bool Binds = false;
  for (const FieldDecl *Field : fieldsWithBases(*Ctor.getParent())) {
    if (!canShareModule(Field->getType()))
      continue;
    std::optional<unsigned> Index = Program.boundParameter(Ctor, *Field);
    // A member bound to nothing that no method reseats holds, for life,
    // what the constructor gave it: not the caller's module unless it was
    // given that (`probe_{nullptr}`, `ema_(Net())` hold their own).
    if (!Index && (!Program.isBindingMember(*Field) ||
                   Argument >= Ctor.getNumParams() ||
                   memberMayKeepModule(*Field, Summary,
                                       *Ctor.getParamDecl(Argument),
                                       /*Defaulted=*/true)))
      return false; // a member that may keep a module out of sight
    Binds |= Index && *Index == Argument;
  }
  return Binds;
}

void FlowModel::transferConstruction(const CXXConstructExpr &E,
                                     const Location &Object,
                                     State &St) const {
  ResolvedCall Call = resolve(E);
  Call.Object = Object;
  const auto *Ctor = dyn_cast_or_null<CXXConstructorDecl>(Call.Callee);
  const FunctionSummary *Summary =
      Call.Callee ? Program.summary(*Call.Callee) : nullptr;
  // `AmpSwitch fp16(at::kHalf)`: the constant stays in the member.
  if (const FunctionSummary *Known = Summary ? summaryForKnownInputs(Call, St)
                                             : nullptr)
    Summary = Known;
  if (Summary) {
    // Members the constructor leaves alone are default-constructed.
    St.forgetTree(Object);
    if (Ctor && !Ctor->isCopyOrMoveConstructor())
      defaultConstructMembers(*Ctor, Object, St);
    applySummary(Call, *Summary, Location(), St);
    applyAutocastSummary(E, Summary, St); // an autocast guard
    // A module handle handed to a constructor may be kept: the object then
    // shares the module, and whatever it does to it later (moves it,
    // switches its mode) the caller's handle cannot follow. It becomes
    // unknown, unless the object provably keeps no such handle.
    for (size_t I = 0; I < Call.Arguments.size(); ++I) {
      const Expr *Arg = Call.Arguments[I];
      if (!Arg || !isModuleHandleType(Arg->getType().getNonReferenceType()))
        continue;
      const ParmVarDecl *Param =
          Ctor && I < Ctor->getNumParams() ? Ctor->getParamDecl(I) : nullptr;
      if (Param && !mayKeepModule(*Ctor, *Summary, *Param))
        continue;
      // Kept only in members bound to it: the object's methods act on the
      // caller's handle through them.
      if (Ctor && keepsModulesOnlyBound(E, *Ctor, *Summary, Object, I))
        continue;
      if (Location Handle = locationOf(stripConversions(Arg)))
        St.forgetTree(Handle);
    }
    return;
  }
  St.forgetTree(Object);
  forgetOpaqueEffects(Call, St);
  // The compiler's default constructor default-constructs every member
  // (an autocast guard among them switches autocast on).
  if (Ctor && Ctor->isDefaultConstructor() && !Ctor->isUserProvided() &&
      Ctor->getParent()->hasDefinition()) {
    defaultConstructMembers(*Ctor, Object, St);
    applyMemberAutocast(*Ctor->getParent(), &E, /*Destroy=*/false, St);
  }
}

void FlowModel::transferDestructor(const VarDecl &Var, State &St) const {
  PathFacts &P = St.path();
  if (isOwningPointer(Var.getType()) || isOptional(Var.getType()))
    destroyOwnedObject(Var.getType(), St);
  // An autocast guard's destructor restores the state it saved.
  if (isAutocastGuard(Var, options())) {
    P.Autocast = AutocastState::Unknown;
    P.AutocastParam = nullptr;
    P.AutocastStart = {nullptr, {}};
  } else if (const CXXRecordDecl *RD = Var.getType()->getAsCXXRecordDecl();
             RD && P.Autocast == AutocastState::On && Var.getInit() &&
             P.AutocastStart.first == Var.getInit()->IgnoreImplicit()) {
    // Only a guard whose construction switched autocast on: other objects'
    // destructors are not read (a summary read from another TU of an
    // audit costs a second analysis of this one).
    applyAutocastDestruction(*RD, St);
  }
  // What the destructor of a local object, or of the object a local
  // std::unique_ptr still holds from make_unique, does: to the caller's
  // objects that members name (`~EvalPhase() { module_.train(); }`), to the
  // machine (`~Fence() { torch::cuda::synchronize(); }`), to the gradients
  // (`~ResetOnExit() { net_->zero_grad(); }`). (A destructor
  // defined in another file is read only for an object that binds members:
  // see above.)
  bool Owner = isOwningPointer(Var.getType());
  auto It = ObjectConstructions.find(&Var);
  bool Constructed = It != ObjectConstructions.end();
  QualType ObjectType = Owner ? ownedType(Var.getType()) : Var.getType();
  const CXXRecordDecl *RD =
      Owner && (!Constructed ||
                !isStdClass(Var.getType()->getAsCXXRecordDecl(), "unique_ptr"))
          ? nullptr
          : ObjectType->getAsCXXRecordDecl();
  if (RD)
    if (const CXXDestructorDecl *Dtor = RD->getDestructor();
        Dtor && Dtor->isUserProvided() && Var.getInit()) {
      bool Binds = Constructed && Program.hasBindingMember(*RD);
      if (Binds || Dtor->isDefined())
        if (const FunctionSummary *Summary = Program.summary(*Dtor)) {
          ResolvedCall Call;
          Call.Call = Constructed ? It->second : Var.getInit();
          Call.Callee = Dtor;
          Call.Object = Location::local(&Var);
          if (Owner)
            Call.Object = Call.Object.child(Selector::element());
          applySummary(Call, *Summary, Location(), St);
          applyGradientSummary(*Call.Call, *Summary, St.path());
          if (Summary->MaySynchronize)
            St.completePendingCopies();
        }
    }
  for (auto It = P.GradGuards.begin(); It != P.GradGuards.end(); ++It)
    if (It->first == &Var) {
      P.Grad = It->second;
      P.GradGuards.erase(It);
      return;
    }
}

} // namespace clang::tidy::torch
