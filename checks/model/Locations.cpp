//===--- Locations.cpp - torch-tidy ---------------------------------------===//
//
// FlowModel::locationOf: the storage an expression denotes. Through
// references (a reference is bound once, so it names its initialiser's
// location), structured bindings, fields, tuple and pair elements, container
// elements (`v[i]`, `v.at(i)`, `m[k]`, `*it`, range-for variables), module
// handles (`*net`, `net.ptr()`), members of `*this` and globals.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "ClassState.h"
#include "ProgramModel.h"
#include "api/StdLibrary.h"
#include "api/TorchApi.h"
#include "api/TorchMatchers.h"
#include "support/UserCodeParents.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

/// The location of the elements of the container \p Container denotes.
static Location elementsOf(Location Container, QualType ContainerType) {
  Location Element = Container.child(Selector::element());
  return Element;
}

/// `m[k]` / `m.at(k)` on a map name the mapped value of an element.
static Location mappedElement(Location Container, QualType ContainerType) {
  Location Element = elementsOf(Container, ContainerType);
  if (const FieldDecl *Second = mappedField(ContainerType))
    return Element.child(Selector::field(Second));
  return Element;
}

/// The field of std::pair that `std::get<I>` names.
static const FieldDecl *pairField(QualType PairType, unsigned Index) {
  const CXXRecordDecl *RD = PairType.getNonReferenceType()->getAsCXXRecordDecl();
  if (!RD || !isStdClass(RD, "pair"))
    return nullptr;
  unsigned I = 0;
  for (const FieldDecl *F : RD->fields())
    if (I++ == Index)
      return F;
  return nullptr;
}

bool FlowModel::isTracked(const ValueDecl *D) const {
  return D && !Escaped.contains(D);
}

Location FlowModel::iteratedElement(const Expr *Iterator) const {
  const auto *Ref = dyn_cast<DeclRefExpr>(Iterator->IgnoreParenImpCasts());
  const auto *It = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
  if (Ref && (!It || !It->hasLocalStorage() || !It->getInit()))
    return {};
  // A local iterator walks what its initialiser names; a temporary one
  // (`m.emplace(k, v).first->second`) what it is computed from.
  const Expr *Container = iteratedContainer(It ? *It->getInit() : *Iterator);
  Location C = Container ? locationOf(Container) : Location();
  return C ? elementsOf(C, Container->getType()) : Location();
}

/// The type of the elements \p Container holds (its `value_type`), or of
/// the object an owning pointer or an optional holds.
static QualType elementType(QualType Container, ASTContext &Ctx) {
  Container = Container.getNonReferenceType().getCanonicalType();
  if (const ArrayType *Array = Container->getAsArrayTypeUnsafe())
    return Array->getElementType();
  const CXXRecordDecl *RD = containerRecord(Container);
  if (!RD && (isOwningPointer(Container) || isOptional(Container)))
    RD = Container->getAsCXXRecordDecl();
  if (!RD)
    return {};
  for (const char *Name : {"value_type", "element_type"})
    for (const NamedDecl *D : RD->lookup(&Ctx.Idents.get(Name)))
      if (const auto *Alias = dyn_cast<TypedefNameDecl>(D))
        return Alias->getUnderlyingType();
  return {};
}

QualType FlowModel::locationType(const Location &L) const {
  QualType T;
  if ((L.Kind == Location::Local || L.Kind == Location::Global) && L.Root)
    T = L.Root->getType();
  for (unsigned I = 0; I < L.Depth; ++I) {
    Selector Step = Selector::fromRaw(L.Path[I]);
    if (const FieldDecl *Field = Step.asField())
      T = Field->getType();
    else if (Step.isElement() && !T.isNull())
      T = elementType(T, Ctx);
    else
      return {};
  }
  return T;
}

Location FlowModel::algorithmElement(const ParmVarDecl &P,
                                     const Expr &Call) const {
  const auto *Lambda = dyn_cast<CXXMethodDecl>(P.getDeclContext());
  const auto *Algorithm = dyn_cast<CallExpr>(&Call);
  const FunctionDecl *FD = Algorithm ? Algorithm->getDirectCallee() : nullptr;
  if (!Lambda || !Lambda->getParent()->isLambda() || !FD ||
      !isLibraryFunction(*FD) || storesCallableArgument(*FD) ||
      !llvm::any_of(Algorithm->arguments(), [&](const Expr *Arg) {
        const auto *L =
            dyn_cast<LambdaExpr>(stripConversions(Arg)->IgnoreImplicit());
        return L && L->getCallOperator()->getCanonicalDecl() ==
                        Lambda->getCanonicalDecl();
      }))
    return {};
  auto Unqualified = [&](QualType T) {
    return T.getNonReferenceType().getCanonicalType().getUnqualifiedType();
  };
  QualType Wanted = Unqualified(P.getType());
  // The one range whose elements have the parameter's type; two different
  // ones (std::transform of two ranges) leave it unknown.
  Location Found;
  for (const Expr *Arg : Algorithm->arguments()) {
    const Expr *Container = iteratedContainer(*Arg);
    if (!Container)
      continue;
    QualType Element = elementType(Container->getType(), Ctx);
    if (Element.isNull() || Unqualified(Element) != Wanted)
      continue;
    Location C = locationOf(Container);
    if (!C)
      return {};
    Location Elements = elementsOf(C, Container->getType());
    if (Found && Found != Elements)
      return {};
    Found = Elements;
  }
  return Found;
}

/// Where a range variable keeps the unvisited elements: its own tree.
static Location unvisitedElements(const VarDecl &Range) {
  return Location::local(&Range).child(Selector::element());
}

void FlowModel::rememberUnvisited(const VarDecl &Range, State &St) const {
  Location Container = Range.getInit() ? locationOf(Range.getInit()) : Location();
  St.forgetTree(unvisitedElements(Range));
  if (!Container)
    return;
  Location Elements = Container.child(Selector::element());
  for (const Location &L : St.tree(Elements))
    St.set(L.replacePrefix(Elements, unvisitedElements(Range)), St.get(L));
}

void FlowModel::enterRangeFor(const CXXForRangeStmt &Loop, State &St) const {
  const auto *Range =
      Loop.getRangeStmt()
          ? dyn_cast_or_null<VarDecl>(Loop.getRangeStmt()->getSingleDecl())
          : nullptr;
  Location Container = Range && ElementwiseLoopRanges.contains(Range)
                           ? locationOf(Loop.getRangeInit())
                           : Location();
  if (!Container)
    return;
  // The element this iteration visits is one no earlier iteration wrote.
  Location Elements = Container.child(Selector::element());
  St.forgetTree(Elements);
  for (const Location &L : St.tree(unvisitedElements(*Range)))
    St.set(L.replacePrefix(unvisitedElements(*Range), Elements), St.get(L));
}

Location FlowModel::pointeeLocation(const Expr *Pointer) const {
  for (unsigned Depth = 0; Pointer && Depth < 4; ++Depth) {
    const Expr *E = Pointer->IgnoreParenImpCasts();
    if (isa<CXXThisExpr>(E))
      return Location::thisObject();
    if (const auto *UO = dyn_cast<UnaryOperator>(E))
      return UO->getOpcode() == UO_AddrOf ? locationOf(UO->getSubExpr())
                                          : Location();
    // `net.get()`: a module handle's raw pointer names its module.
    if (isa<CXXMemberCallExpr>(E) && isModuleHandleType(E->getType()))
      return locationOf(E);
    const auto *Ref = dyn_cast<DeclRefExpr>(E);
    const auto *Var = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
    // One object for the whole call, like a reference: a pointer the
    // function never reseats and whose address it does not keep.
    if (!Var || !Var->getType()->isPointerType() || !Var->hasLocalStorage() ||
        !isTracked(Var) || ReseatedPointers.contains(Var) ||
        Var->getDeclContext() != Function)
      return {};
    if (isa<ParmVarDecl>(Var))
      return Location::local(Var);
    Pointer = Var->getInit();
  }
  return {};
}

Location FlowModel::locationOf(const Expr *E) const {
  for (unsigned Depth = 0; E && Depth < 8; ++Depth) {
    E = E->IgnoreParenImpCasts();
    if (const auto *MTE = dyn_cast<MaterializeTemporaryExpr>(E)) {
      E = MTE->getSubExpr();
      continue;
    }
    // `static_cast<Derived &>(*this)` (a CRTP base's self()) names the
    // same object.
    if (const auto *Cast = dyn_cast<CXXStaticCastExpr>(E);
        Cast && (Cast->getCastKind() == CK_BaseToDerived ||
                 Cast->getCastKind() == CK_DerivedToBase ||
                 Cast->getCastKind() == CK_NoOp) &&
        Cast->getType()->isRecordType()) {
      E = Cast->getSubExpr();
      continue;
    }
    // std::move(x), std::forward<T>(x) name x; a smart-pointer cast, x's
    // object.
    if (const Expr *Moved = movedOrForwarded(E)) {
      E = Moved;
      continue;
    }
    if (const Expr *Cast = smartPointerCastSource(E)) {
      E = Cast;
      continue;
    }
    break;
  }
  if (!E)
    return {};

  if (isa<CXXThisExpr>(E))
    return Location::thisObject();

  if (const auto *Ref = dyn_cast<DeclRefExpr>(E)) {
    const ValueDecl *D = Ref->getDecl();
    // `auto [loss, acc] = ...`: the binding names a part of the hidden
    // variable.
    if (const auto *Binding = dyn_cast<BindingDecl>(D))
      return Binding->getBinding() ? locationOf(Binding->getBinding())
                                   : Location();
    const auto *VD = dyn_cast<VarDecl>(D);
    if (!VD || !isTracked(VD))
      return {};
    if (VD->getType()->isReferenceType()) {
      // A reference parameter (`Net &net`, `const Tensor &x`) names one
      // object for the whole call.
      if (isa<ParmVarDecl>(VD))
        return Location::local(VD);
      // A local reference names what it was bound to (`auto &&__range = v;`
      // in a range-for too); bound to what the analysis does not track (a
      // loader's batch), it names one object for its lifetime.
      if (VD->hasLocalStorage() && VD->getInit())
        if (Location Bound = locationOf(VD->getInit()))
          return Bound;
      return VD->hasLocalStorage() ? Location::local(VD) : Location();
    }
    if (auto It = HandleAliases.find(VD); It != HandleAliases.end())
      return locationOf(It->second);
    if (VD->hasLocalStorage())
      return Location::local(VD);
    // A global of the user's; LibTorch's constants (`torch::kCUDA`) are
    // values, not storage.
    if (VD->hasGlobalStorage() && !VD->getType().isVolatileQualified() &&
        !VD->isConstexpr() &&
        !isSystemHeaderDecl(*VD, VD->getASTContext().getSourceManager()))
      return Location::global(VD);
    return {};
  }

  if (const auto *Member = dyn_cast<MemberExpr>(E)) {
    if (const auto *Static = dyn_cast<VarDecl>(Member->getMemberDecl()))
      return isTracked(Static) && !Static->isConstexpr() &&
                     !isSystemHeaderDecl(*Static,
                                         Static->getASTContext().getSourceManager())
                 ? Location::global(Static)
                 : Location();
    const auto *Field = dyn_cast<FieldDecl>(Member->getMemberDecl());
    if (!Field || (Field->getType()->isReferenceType() &&
                   !Program.isBindingMember(*Field)))
      return {};
    const Expr *Base = Member->getBase()->IgnoreParenImpCasts();
    if (isa<CXXThisExpr>(Base))
      return Location::member(Field);
    if (Member->isArrow()) {
      if (Location Pointee = pointeeLocation(Base))
        return Pointee.child(Selector::field(Field));
      // `it->second` on an iterator of a container.
      if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Base);
          Op && Op->getOperator() == OO_Arrow && Op->getNumArgs() == 1)
        if (Location Element = locationOf(Op))
          return Element.child(Selector::field(Field));
      // `p->field` for a pointer that walks a container.
      if (Location Element = iteratedElement(Base))
        return Element.child(Selector::field(Field));
      return {};
    }
    if (Location Object = locationOf(Base))
      return throughBindings(Object.child(Selector::field(Field)));
    return {};
  }

  if (const auto *Sub = dyn_cast<ArraySubscriptExpr>(E)) {
    if (!Sub->getBase()->IgnoreParenImpCasts()->getType()->isArrayType())
      return {};
    Location Array = locationOf(Sub->getBase());
    return Array ? Array.child(Selector::element()) : Location();
  }

  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E)) {
    if (Op->getNumArgs() == 0)
      return {};
    const Expr *Object = Op->getArg(0);
    QualType ObjectType = Object->getType();
    switch (Op->getOperator()) {
    case OO_Subscript:
      if (containerRecord(ObjectType))
        if (Location C = locationOf(Object))
          return isMapContainer(containerRecord(ObjectType))
                     ? mappedElement(C, ObjectType)
                     : elementsOf(C, ObjectType);
      return {};
    case OO_Star:
    case OO_Arrow:
      // `*net`, `net->`: a module handle stands for its module; so does a
      // std::shared_ptr to one (whose operators are its base class's)
      // handed on as `*net`, as module calls (`net->train()`) name it.
      if (isModuleHandleType(ObjectType) ||
          (Op->getOperator() == OO_Star &&
           isModuleHandleType(Object->IgnoreParenImpCasts()->getType())))
        return locationOf(Object);
      // `*o`, `o->`: the value an optional holds, the object a unique or
      // (a local's, that nothing copies) shared pointer owns.
      // (shared_ptr's operators are its base class's.)
      if (QualType Owner = Object->IgnoreParenImpCasts()->getType();
          isOptional(ObjectType) || isOwningPointer(Owner))
        if (Location C = locationOf(Object))
          if (!isStdClass(Owner.getNonReferenceType()->getAsCXXRecordDecl(),
                          "shared_ptr") ||
              (C.Kind == Location::Local && !C.Depth &&
               !isa<ParmVarDecl>(C.Root)))
            return elementsOf(C, ObjectType);
      // `*it`, `it->`: an element of the container the iterator walks.
      return iteratedElement(Object);
    default:
      return {};
    }
  }

  if (const auto *UO = dyn_cast<UnaryOperator>(E)) {
    if (UO->getOpcode() != UO_Deref)
      return {};
    if (Location Pointee = pointeeLocation(UO->getSubExpr()))
      return Pointee;
    // `*p` for a pointer that walks a container (std::array's iterator).
    return iteratedElement(UO->getSubExpr());
  }

  if (const auto *Call = dyn_cast<CXXMemberCallExpr>(E)) {
    const CXXMethodDecl *MD = Call->getMethodDecl();
    const Expr *Object = Call->getImplicitObjectArgument();
    if (!MD || !MD->getIdentifier() || !Object)
      return {};
    llvm::StringRef Name = MD->getName();
    QualType ObjectType = Object->getType();
    if (ObjectType->isPointerType())
      ObjectType = ObjectType->getPointeeType();
    if (containerRecord(ObjectType) &&
        (Name == "at" || Name == "front" || Name == "back" ||
         (Name == "value" && isOptional(ObjectType)))) {
      Location C = locationOf(Object);
      if (!C)
        return {};
      return Name == "at" && isMapContainer(containerRecord(ObjectType))
                 ? mappedElement(C, ObjectType)
                 : elementsOf(C, ObjectType);
    }
    // `net.ptr()`, `net.get()`: the same module.
    if ((Name == "ptr" || Name == "get") && isModuleHandleType(ObjectType))
      return locationOf(Object);
    return returnedStorageAt(*Call);
  }

  if (const auto *Call = dyn_cast<CallExpr>(E)) {
    // `std::get<I>(t)`.
    const FunctionDecl *FD = Call->getDirectCallee();
    if (!FD || !FD->isInStdNamespace() || !FD->getIdentifier() ||
        FD->getName() != "get" || Call->getNumArgs() != 1)
      return returnedStorageAt(*Call);
    const TemplateArgumentList *Args = FD->getTemplateSpecializationArgs();
    QualType Whole = Call->getArg(0)->getType();
    // `std::get<1>(v)`, `std::get<Tensor>(v)` of a variant, `std::get<0>(a)`
    // of a std::array: the element.
    if (isOptional(Whole) || isStdClass(containerRecord(Whole), "array")) {
      Location Container = locationOf(Call->getArg(0));
      return Container ? elementsOf(Container, Whole) : Location();
    }
    if (!Args || Args->size() < 1 ||
        (*Args)[0].getKind() != TemplateArgument::Integral)
      return {};
    unsigned Index = unsigned((*Args)[0].getAsIntegral().getZExtValue());
    Location Tuple = locationOf(Call->getArg(0));
    if (!Tuple)
      return {};
    if (const FieldDecl *F = pairField(Call->getArg(0)->getType(), Index))
      return Tuple.child(Selector::field(F));
    return Tuple.child(Selector::tupleElement(Index));
  }
  return {};
}

ValueFacts FlowModel::evaluatePartOfResult(const Expr *E, const State &S) const {
  const Expr *Whole = nullptr;
  const FieldDecl *Field = nullptr;
  std::optional<unsigned> Index;
  if (const auto *Member = dyn_cast<MemberExpr>(E); Member && !Member->isArrow()) {
    Whole = Member->getBase();
    Field = dyn_cast<FieldDecl>(Member->getMemberDecl());
  } else if (const auto *Get = dyn_cast<CallExpr>(E);
             Get && Get->getNumArgs() == 1 && Get->getDirectCallee() &&
             Get->getDirectCallee()->isInStdNamespace() &&
             Get->getDirectCallee()->getIdentifier() &&
             Get->getDirectCallee()->getName() == "get") {
    const TemplateArgumentList *Args =
        Get->getDirectCallee()->getTemplateSpecializationArgs();
    if (Args && Args->size() >= 1 &&
        (*Args)[0].getKind() == TemplateArgument::Integral) {
      Whole = Get->getArg(0);
      Index = unsigned((*Args)[0].getAsIntegral().getZExtValue());
      Field = pairField(Whole->getType(), *Index);
    }
  }
  const auto *Call = Whole ? dyn_cast<CallExpr>(stripConversions(Whole)) : nullptr;
  // Only a call with a summary has parts to read: no copy of the state
  // for the rest.
  if (!Call || (!Field && !Index) || !summaryAt(*Call, S))
    return {};
  State Scratch = S;
  Location Result = Location::returned();
  if (!assignCallResult(Result, Call, Scratch))
    return {};
  Location Part = Field ? Result.child(Selector::field(Field))
                        : Result.child(Selector::tupleElement(*Index));
  return evaluateLocation(*E, Part, Scratch);
}

Location FlowModel::returnedStorageAt(const CallExpr &Call) const {
  const FunctionDecl *Callee = Call.getDirectCallee();
  if (!Callee || isLibraryFunction(*Callee))
    return {};
  // A reference names the storage; a copy from a const method holds what
  // it held.
  const auto *Method = dyn_cast<CXXMethodDecl>(Callee);
  if (!Callee->getReturnType()->isReferenceType() &&
      !(Method && Method->isConst()))
    return {};
  const FunctionSummary *S = Program.summaryForCall(Call);
  if (!S || !S->ReturnedStorage)
    return {};
  return callerLocation(S->ReturnedStorage, resolve(Call));
}

bool FlowModel::isOutsidePaths(const Expr &E) const {
  const Stmt *Body = Function ? Function->getBody() : nullptr;
  const SourceManager &SM = Ctx.getSourceManager();
  SourceLocation Where = SM.getExpansionLoc(E.getBeginLoc());
  if (Body && !SM.isBeforeInTranslationUnit(
                  Where, SM.getExpansionLoc(Body->getBeginLoc())))
    return false;
  // Before the body: in a written initialiser of the constructor, or in a
  // member's default one.
  const auto *Constructor = dyn_cast_or_null<CXXConstructorDecl>(Function);
  return !Constructor ||
         !llvm::any_of(Constructor->inits(), [&](const CXXCtorInitializer *I) {
           return I->isWritten() && I->getInit() &&
                  !SM.isBeforeInTranslationUnit(
                      Where, SM.getExpansionLoc(I->getSourceLocation()));
         });
}

Location FlowModel::throughBindings(const Location &L) const {
  for (unsigned I = 0; I < L.Depth; ++I) {
    const FieldDecl *Field = Selector::fromRaw(L.Path[I]).asField();
    if (!Field)
      continue;
    if (!Program.isBindingMember(*Field))
      continue;
    bool Reference = Field->getType()->isReferenceType();
    unsigned ObjectDepth = 0;
    const VarDecl *Object = constructedObject(L, ObjectDepth);
    if (Object && ObjectDepth == I) {
      ResolvedCall Built = resolve(*ObjectConstructions.lookup(Object));
      const auto *Ctor = dyn_cast_or_null<CXXConstructorDecl>(Built.Callee);
      if (std::optional<unsigned> Index =
              Ctor ? Program.boundParameter(*Ctor, *Field) : std::nullopt;
          Index && *Index < Built.Arguments.size() && Built.Arguments[*Index])
        if (Location Target =
                locationOf(stripConversions(Built.Arguments[*Index]))) {
          Location Member = Location::local(Object);
          if (ObjectDepth)
            Member = Member.child(Selector::element());
          return L.replacePrefix(Member.child(Selector::field(Field)), Target);
        }
    }
    if (!Reference)
      return L;
    // A reference member of `*this`, of a parameter, or of a variable a
    // lambda captures: what the caller built it from decides.
    bool CallerBinds =
        I == 0 && (L.Kind == Location::This ||
                   (L.Kind == Location::Local &&
                    (isa<ParmVarDecl>(L.Root) ||
                     L.Root->getDeclContext() != Function)));
    return CallerBinds ? L : Location();
  }
  return L;
}

const VarDecl *FlowModel::constructedObject(const Location &L,
                                            unsigned &Depth) const {
  const auto *Var = L.Kind == Location::Local
                        ? dyn_cast_or_null<VarDecl>(L.Root)
                        : nullptr;
  if (!Var || !ObjectConstructions.count(Var))
    return nullptr;
  Depth = isOwningPointer(Var->getType()) ? 1 : 0;
  if (L.Depth < Depth ||
      (Depth && !Selector::fromRaw(L.Path[0]).isElement()))
    return nullptr;
  return Var;
}

llvm::SmallVector<std::pair<Location, Location>, 2>
FlowModel::boundMembers(const Location &Object) const {
  llvm::SmallVector<std::pair<Location, Location>, 2> Out;
  unsigned Depth = 0;
  const VarDecl *Var = constructedObject(Object, Depth);
  if (!Var || Object.Depth != Depth)
    return Out;
  QualType Type = Var->getType();
  const CXXRecordDecl *Class = (Depth ? ownedType(Type) : Type)
                                   ->getAsCXXRecordDecl();
  if (!Class || !Class->hasDefinition())
    return Out;
  for (const FieldDecl *Field : fieldsWithBases(*Class)) {
    if (!Program.isBindingMember(*Field))
      continue;
    Location Member = Object.child(Selector::field(Field));
    if (Location Target = throughBindings(Member); Target && Target != Member)
      Out.push_back({Member, Target});
  }
  return Out;
}

void FlowModel::forgetBoundObjects(const Location &Object, State &St) const {
  for (const auto &Bound : boundMembers(Object))
    St.forgetTree(Bound.second);
}

} // namespace clang::tidy::torch
