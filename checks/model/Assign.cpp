//===--- Assign.cpp - torch-tidy ------------------------------------------===//
//
// FlowModel's writes: a declaration or an assignment writes the value of its
// initialiser into a location, part by part for containers, tuples, pairs
// and aggregates, and through a user function's summary for what it
// returns. One element of a container picked by index or key joins into the
// element location that stands for all of them.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "ProgramModel.h"
#include "api/Devices.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

//===--- Writes ------------------------------------------------------------===//

/// What a scalar written on a path proves: its own implications, and, when
/// it is a constant, the path's facts (`use_cuda = true;` under an
/// availability check).
static ScalarFacts withPath(ScalarFacts F, const PathFacts &P) {
  Implication Here{P.Cuda == CudaGuard::Checked, P.CountAtLeast};
  // A value that is never true (false) on this path implies anything when
  // true (false).
  const Implication Vacuous{true, EveryDevice};
  if (F.Known) {
    F.IfTrue = *F.Known ? Here : Vacuous;
    F.IfFalse = *F.Known ? Vacuous : Here;
  }
  return F;
}

void FlowModel::assignValue(const Location &L, QualType Type, const Expr *Init,
                            SourceLocation Loc, State &St) const {
  Type = Type.getNonReferenceType();
  ValueFacts F;
  if (isModuleHandleType(Type) && !Init) {
    // `Net net;`: a module built here.
    if (const CXXRecordDecl *RD = Type->getAsCXXRecordDecl(); RD && !Type->isPointerType())
      F = newModuleFacts(Type, Loc);
    St.forgetTree(L);
    St.set(L, F);
    return;
  }
  if (Init)
    F = evaluate(Init, St);
  if (isModuleHandleType(Type) && Init) {
    const Expr *Stripped = Init->IgnoreImplicit();
    if (const auto *Construct = dyn_cast<CXXConstructExpr>(Stripped);
        Construct && !Construct->getConstructor()->isCopyOrMoveConstructor())
      F = evaluateConstruction(*Construct, St);
    else if (const auto *Call = dyn_cast<CallExpr>(Stripped))
      if (isOwnerFactory(Call->getDirectCallee())) {
        // std::make_shared<Net>(...): a module built here.
        F = newModuleFacts(Type, Loc);
      }
  }
  // A device variable that holds no constant is named after itself; a
  // member keeps the parameter it stores (`device_(device)`), which the class
  // state resolves to what the callers pass.
  bool StoresParameter =
      L.Kind == Location::This && F.Device.Value.isSymbolic() &&
      isa_and_nonnull<ParmVarDecl>(F.Device.Value.holder());
  // (`auto type = cuda ? torch::kCUDA : torch::kCPU;` is a device variable
  // too: a DeviceType.)
  // A reference names the device it binds (`const Device &d =
  // ctx.device()`), symbolic or not.
  const auto *Var = L.Kind == Location::Local && !L.Depth
                        ? dyn_cast_or_null<VarDecl>(L.Root)
                        : nullptr;
  bool Binds = Var && Var->getType()->isReferenceType() &&
               F.Device.Value.isSymbolic();
  if ((isDeviceType(Type) || isDeviceTypeEnum(Type)) && Init &&
      !StoresParameter && !Binds &&
      (!F.Device.Value.isKnown() || F.Device.Value.isSymbolic()) &&
      !F.Device.Entry)
    if (const NamedDecl *Holder = L.Depth ? static_cast<const NamedDecl *>(
                                                L.last().asField())
                                          : L.Root)
      F.Device = {DeviceValue::symbolic(Holder), Loc};
  if (isScalarType(Type))
    F.Scalar = withPath(F.Scalar, St.path());
  // backward() runs on this value later: LibTorch requires a graph.
  if (L.Kind == Location::Local && !L.Depth && isTensorType(Type) &&
      F.Graph.Value == GraphState::Unknown)
    if (const CallExpr *Backward = BackwardReceivers.lookup(L.Root))
      F.Graph = {GraphState::InGraph, Backward->getExprLoc()};
  if (!isTensorType(Type))
    F.clearPendingCopy();
  // Kept where the function's caller or a later call may read it: no longer
  // a copy that only the function's result holds.
  bool OwnVariable = L.Kind == Location::Local && !L.Depth &&
                     !L.Root->getType()->isReferenceType();
  bool Returned = L.Kind == Location::Return && !L.Depth;
  if (!OwnVariable && !Returned)
    F.clearConvertedCopy();
  // A default-constructed tensor, or an empty holder, holds nothing yet.
  if (!Init && (isTensorType(Type) || containerRecord(Type)))
    F.Empty = true;
  St.forgetTree(L);
  St.set(L, F);
}

/// Whether \p Target names one element of a container, picked by index or
/// key (`v[i]`, `m.at(k)`, `v.back()`): one of the elements that the
/// container's element location stands for.
/// A value of \p T has no facts to keep: a number, a string, a struct of
/// them (a variant's `DrySkip{wet}` alternative is no tensor).
static bool holdsNoFacts(QualType T, unsigned Depth = 0) {
  T = T.getNonReferenceType().getCanonicalType();
  if (T->isArithmeticType() || T->isEnumeralType() || isStringType(T))
    return true;
  const CXXRecordDecl *RD = T->getAsCXXRecordDecl();
  if (!RD || !RD->hasDefinition() || Depth > 2 || isTorchValueType(T) ||
      containerRecord(T) || isCallableType(T) || RD->getNumBases() > 0)
    return false;
  return llvm::all_of(RD->fields(), [&](const FieldDecl *Field) {
    return holdsNoFacts(Field->getType(), Depth + 1);
  });
}

static bool namesOneElement(const Expr &Target) {
  const auto *Call = dyn_cast<CallExpr>(Target.IgnoreParenImpCasts());
  const auto *Method =
      Call ? dyn_cast_or_null<CXXMethodDecl>(Call->getDirectCallee()) : nullptr;
  return Method &&
         containerRecord(QualType(Method->getParent()->getTypeForDecl(), 0));
}

/// Whether a container that \p Part lies in holds no element yet in \p S.
static bool holdsNoElement(const State &S, Location Part) {
  for (; Part.Depth; Part = Part.parent())
    if (Part.last().isElement())
      if (const ValueFacts *Elements = S.lookup(Part); Elements && Elements->Empty)
        return true;
  return false;
}

void FlowModel::assignTo(const Expr &Target, const Expr *Value,
                         SourceLocation Loc, State &St) const {
  Location L = locationOf(&Target);
  if (!L || !namesOneElement(Target)) {
    assign(L, Target.getType(), Value, Loc, St);
    return;
  }
  // The other elements keep what they held: the element location holds
  // what either may.
  const State Before = St;
  assign(L, Target.getType(), Value, Loc, St);
  llvm::SmallVector<Location, 4> Written = St.tree(L);
  for (const Location &Part : Before.tree(L))
    if (!llvm::is_contained(Written, Part))
      Written.push_back(Part);
  for (const Location &Part : Written) {
    const ValueFacts *Old = Before.lookup(Part);
    const ValueFacts *New = St.lookup(Part);
    if (!Old && New && holdsNoElement(Before, Part))
      continue; // the first element written
    if (Old && New)
      St.set(Part, joinFacts(*Old, *New));
    else
      St.forget(Part);
  }
}

/// The construction of the object an owning pointer is given:
/// `std::make_unique<T>(args)`, `new T(args)`, `std::unique_ptr<T>(new T)`.
static const Expr *ownedConstruction(const Expr *E) {
  for (unsigned Depth = 0; E && Depth < 3; ++Depth) {
    E = E->IgnoreImplicit();
    if (const auto *New = dyn_cast<CXXNewExpr>(E))
      return New->getConstructExpr();
    if (const auto *Call = dyn_cast<CallExpr>(E))
      return isOwnerFactory(Call->getDirectCallee()) ? Call : nullptr;
    const auto *Construct = dyn_cast<CXXConstructExpr>(E);
    if (!Construct || Construct->getNumArgs() != 1 ||
        !isOwningPointer(Construct->getType()))
      return nullptr;
    E = Construct->getArg(0);
  }
  return nullptr;
}

bool FlowModel::constructOwned(const Location &Owner, const Expr *Init,
                               State &St) const {
  const Expr *Construction = Init ? ownedConstruction(Init) : nullptr;
  if (!Construction)
    return false;
  ResolvedCall Resolved = resolve(*Construction, St);
  const FunctionSummary *Summary =
      Resolved.Callee ? Program.summary(*Resolved.Callee) : nullptr;
  if (!Summary || !isa<CXXConstructorDecl>(Resolved.Callee))
    return false;
  // The constructor runs on the owned object.
  St.forgetTree(Owner);
  Resolved.Object = Owner.child(Selector::element());
  applySummary(Resolved, *Summary, Location(), St);
  return true;
}

bool FlowModel::assignCallResult(const Location &L, const Expr *Value,
                                 State &St) const {
  const auto *Call = dyn_cast_or_null<CallExpr>(Value);
  const FunctionSummary *Summary = Call ? summaryAt(*Call, St) : nullptr;
  if (!Summary)
    return false;
  ResolvedCall Resolved = resolve(*Call, St);
  // A module called with an input on another device fails (reported
  // there): no part of its output decides anything more.
  // (Only the call's own conflict: an input computed from one on an
  // earlier iteration does not silence this iteration's outputs.)
  ModuleCall Run;
  bool Conflict = false;
  if (matchModuleCall(*Call, Run) && !Run.TypeErased && !Run.Inputs.empty()) {
    ValueFacts Module = evaluate(Run.Module, St);
    withClassFacts(Module, Run.Module->getType().getNonReferenceType());
    Conflict = Module.HasParameters != Tri::No &&
               compareDevices(Module.Device.Value,
                              evaluate(Run.Inputs[0], St).Device.Value) !=
                   DeviceConflict::None;
  }
  St.forgetTree(L);
  applySummary(Resolved, *Summary, L, St);
  // Each part: a conflict's output decides nothing more; a mean loss in a
  // struct the call returns inside a float16 region is that region's.
  for (const Location &Part : St.tree(L)) {
    ValueFacts F = St.get(Part);
    F.FromDeviceConflict |= Conflict;
    stampAutocast(F, St);
    St.set(Part, F);
  }
  return true;
}

void FlowModel::assign(const Location &L, QualType Type, const Expr *Init,
                       SourceLocation Loc, State &St) const {
  if (!L)
    return;
  // The whole object changes, parts included; each branch below reads the
  // value before it forgets the old one.
  Type = Type.getNonReferenceType();
  const Expr *Stripped = Init ? Init->IgnoreImplicit() : nullptr;
  if (const auto *EWC = dyn_cast_or_null<ExprWithCleanups>(Stripped))
    Stripped = EWC->getSubExpr()->IgnoreImplicit();
  // `Losses{total}`: the braced list.
  if (const auto *Cast = dyn_cast_or_null<CXXFunctionalCastExpr>(Stripped))
    Stripped = Cast->getSubExpr()->IgnoreImplicit();
  // `auto h2 = h;`, `return h;`: a copy or a move of a container or a
  // struct has the parts of its source. (A module handle shares its module,
  // and the values below are read whole.)
  if (const auto *Copy = dyn_cast_or_null<CXXConstructExpr>(Stripped);
      Copy && Copy->getConstructor()->isCopyOrMoveConstructor() &&
      Copy->getNumArgs() >= 1 && !isTorchValueType(Type))
    Stripped = Copy->getArg(0)->IgnoreImplicit();

  // `c ? Shard{} : sample(n)` of an object with parts: each arm's parts,
  // joined as paths are.
  if (const auto *Choice = dyn_cast_or_null<ConditionalOperator>(Stripped);
      Choice && !isTorchValueType(Type) && Type->isRecordType()) {
    State Other = St;
    assign(L, Type, Choice->getTrueExpr(), Loc, St);
    assign(L, Type, Choice->getFalseExpr(), Loc, Other);
    St.joinWith(Other);
    return;
  }

  // A built-in array of tensors (`torch::Tensor frames[4] = {a, b};`): its
  // elements, like a container's.
  if (isTensorArrayType(Type)) {
    ValueFacts Joined;
    Joined.Empty = true;
    if (const auto *List = dyn_cast_or_null<InitListExpr>(Stripped)) {
      for (const Expr *E : List->inits())
        Joined = joinFacts(Joined, evaluate(E, St));
      // Elements the list leaves out are default-constructed: nothing yet.
    } else if (Location From = Stripped ? locationOf(Stripped) : Location()) {
      St.copyTree(From, L);
      return;
    } else if (Stripped && !isa<CXXConstructExpr>(Stripped)) {
      Joined = ValueFacts();
    }
    St.forgetTree(L);
    St.set(L.child(Selector::element()), Joined);
    return;
  }

  // An owning pointer: the object it owns (`std::make_unique<T>(args)`),
  // or, from another owner (`std::move(p)`), that one's.
  if (isOwningPointer(Type) && !isModuleHandleType(Type)) {
    Location Owned = L.child(Selector::element());
    QualType OwnedType = ownedType(Type);
    if (Location From = Stripped ? locationOf(Stripped) : Location()) {
      St.copyTree(From, L);
      return;
    }
    if (constructOwned(L, Stripped, St))
      return;
    if (assignCallResult(L, Stripped, St))
      return;
    const auto *Make = dyn_cast_or_null<CallExpr>(Stripped);
    bool Made = Make && isOwnerFactory(Make->getDirectCallee());
    ValueFacts Value;
    if (Made && Make->getNumArgs() == 0)
      Value.Empty = true;
    else if (Made && Make->getNumArgs() == 1 && isTensorType(OwnedType))
      Value = evaluate(Make->getArg(0), St);
    St.forgetTree(L);
    St.set(Owned, Value);
    return;
  }

  // A container: its elements, from an initialiser list or a copy.
  if (containerRecord(Type)) {
    Location Elements = L.child(Selector::element());
    // An optional given a value (`o = t`, `std::optional<T> o(t)`,
    // `std::make_optional(t)`): that value is its element.
    if (isOptional(Type) && Stripped) {
      const Expr *Value = Stripped;
      if (const auto *Construct = dyn_cast<CXXConstructExpr>(Value);
          Construct && Construct->getNumArgs() == 1 &&
          !Construct->getConstructor()->isCopyOrMoveConstructor())
        Value = Construct->getArg(0)->IgnoreImplicit();
      if (const auto *Call = dyn_cast<CallExpr>(Value);
          Call && Call->getNumArgs() == 1 && Call->getDirectCallee() &&
          Call->getDirectCallee()->isInStdNamespace() &&
          Call->getDirectCallee()->getIdentifier() &&
          Call->getDirectCallee()->getName() == "make_optional")
        Value = Call->getArg(0)->IgnoreImplicit();
      if (Value != Stripped || !isOptional(Value->getType())) {
        St.forgetTree(L);
        ValueFacts Nothing;
        Nothing.Empty = true;
        if (isa<CXXNullPtrLiteralExpr>(Value) ||
            Value->getType().getAsString().find("nullopt") != std::string::npos ||
            holdsNoFacts(Value->getType()))
          St.set(Elements, Nothing);
        else
          assign(Elements, Value->getType(), Value, Loc, St);
        return;
      }
    }
    if (Stripped)
      if (Location From = locationOf(Stripped)) {
        St.copyTree(From, L);
        return;
      }
    // `net->parameters()`, `net->buffers()`: tensors on the module's device.
    if (const auto *Call = dyn_cast_or_null<CallExpr>(Stripped))
      for (llvm::StringRef Method : {"parameters", "buffers"})
        if (const Expr *Module = moduleMethodCallReceiver(*Call, Method)) {
          ValueFacts Element;
          Element.Device = evaluate(Module, St).Device;
          St.forgetTree(L);
          St.set(Elements, Element);
          return;
        }
    const auto *Construct = dyn_cast_or_null<CXXConstructExpr>(Stripped);
    if (!Stripped || (Construct && Construct->getNumArgs() == 0)) {
      ValueFacts Nothing;
      Nothing.Empty = true;
      St.forgetTree(L);
      St.set(Elements, Nothing);
      return;
    }
    // `std::vector<T> v(first, last)`: elements of the container that the
    // iterators walk (a subset of them: the elements are one location).
    if (Construct && Construct->getNumArgs() >= 2 &&
        Construct->getArg(0)->getType().getCanonicalType() ==
            Construct->getArg(1)->getType().getCanonicalType())
      if (const Expr *Source = iteratedContainer(*Construct->getArg(0))) {
        Source = stripConversions(Source);
        if (Location From = locationOf(Source)) {
          St.forgetTree(L);
          St.copyTree(From.child(Selector::element()), Elements);
          return;
        }
        if (assignCallResult(L, Source, St))
          return;
        St.forgetTree(L);
        return;
      }
    // `std::vector<T> v(n)`: n default-constructed elements; `v(n, x)`:
    // n copies of x.
    if (Construct && Construct->getNumArgs() >= 1 &&
        Construct->getArg(0)->getType()->isIntegerType()) {
      ValueFacts Element;
      Element.Empty = true;
      // `std::vector<Net> folds(3)`: each a module built here.
      if (const CXXRecordDecl *Value = containerValueRecord(Type);
          Value && isModuleHandleType(Ctx.getRecordType(Value)) &&
          !isOwningPointer(Ctx.getRecordType(Value)))
        Element = newModuleFacts(Ctx.getRecordType(Value), Loc);
      if (Construct->getNumArgs() >= 2 &&
          !isa<CXXDefaultArgExpr>(Construct->getArg(1)) &&
          !containerRecord(Construct->getArg(1)->getType()))
        Element = evaluate(Construct->getArg(1), St);
      St.forgetTree(L);
      St.set(Elements, Element);
      return;
    }
    const InitListExpr *List = nullptr;
    if (Construct && Construct->getNumArgs() >= 1)
      if (const auto *Std = dyn_cast<CXXStdInitializerListExpr>(
              Construct->getArg(0)->IgnoreImplicit()))
        List = dyn_cast<InitListExpr>(Std->getSubExpr()->IgnoreImplicit());
    // `v = {0, 1};`: the assignment's initializer list.
    if (const auto *Std = dyn_cast<CXXStdInitializerListExpr>(Stripped);
        !List && Std)
      List = dyn_cast<InitListExpr>(Std->getSubExpr()->IgnoreImplicit());
    if (!List)
      List = dyn_cast<InitListExpr>(Stripped);
    // `std::array<T, N> a{x, y}`: an aggregate whose one member, a built-in
    // array, takes the elements.
    if (List && List->getNumInits() == 1)
      if (const auto *Inner = dyn_cast<InitListExpr>(
              List->getInit(0)->IgnoreImplicit());
          Inner && Inner->getType()->isArrayType())
        List = Inner;
    if (List) {
      // A map's `{{k, v}, ...}`: the mapped values.
      const FieldDecl *Second = mappedField(Type);
      ValueFacts Joined;
      Joined.Empty = true;
      Location Target =
          Second ? Elements.child(Selector::field(Second)) : Elements;
      St.forgetTree(L);
      for (const Expr *E : List->inits()) {
        const Expr *Value = E;
        if (Second) {
          const Expr *Pair = E->IgnoreImplicit();
          if (const auto *Construct = dyn_cast<CXXConstructExpr>(Pair);
              Construct && Construct->getNumArgs() == 2)
            Value = Construct->getArg(1);
          else if (const auto *Init = dyn_cast<InitListExpr>(Pair);
                   Init && Init->getNumInits() == 2)
            Value = Init->getInit(1);
          else
            Value = nullptr;
        }
        if (Value)
          joinElementParts(Target, *Value, Loc, Joined.Empty, St);
        else
          St.forgetTree(Target);
        Joined = joinFacts(Joined, Value ? evaluate(Value, St) : ValueFacts());
      }
      St.set(Target, Joined);
      return;
    }
    // `auto parts = x.chunk(4)`: tensors computed where the operands are.
    if (std::optional<ValueFacts> Element = tensorTupleElement(*Stripped, 0, St)) {
      St.forgetTree(L);
      St.set(Elements, *Element);
      return;
    }
    if (!assignCallResult(L, Stripped, St))
      St.forgetTree(L);
    return;
  }

  // A pair, a tuple or an aggregate: part by part.
  if (Stripped) {
    if (Location From = locationOf(Stripped)) {
      if (From != L)
        St.copyTree(From, L);

      if (!isTupleLike(Type) && !Type->isRecordType())
        assignValue(L, Type, Init, Loc, St);
      else if (const ValueFacts *Whole = St.lookup(From))
        St.set(L, *Whole);
      else if (const auto *P = dyn_cast_or_null<ParmVarDecl>(From.Root);
               P && !From.Depth && From.Kind == Location::Local &&
               P->getDeclContext() == Function)
        St.set(L, ValueFacts::atEntry(*P)); // the caller's, parts included
      return;
    }
    llvm::SmallVector<const Expr *, 4> Parts;
    const CXXRecordDecl *RD = Type->getAsCXXRecordDecl();
    if (const auto *Call = dyn_cast<CallExpr>(Stripped)) {
      const FunctionDecl *FD = Call->getDirectCallee();
      if (FD && FD->isInStdNamespace() && FD->getIdentifier() &&
          (FD->getName() == "make_tuple" || FD->getName() == "make_pair" ||
           FD->getName() == "forward_as_tuple"))
        Parts.assign(Call->arg_begin(), Call->arg_end());
    } else if (const auto *Construct = dyn_cast<CXXConstructExpr>(Stripped)) {
      if (isTupleLike(Type) && Construct->getNumArgs() >= 2)
        Parts.assign(Construct->arg_begin(), Construct->arg_end());
    } else if (const auto *List = dyn_cast<InitListExpr>(Stripped)) {
      if (RD && (RD->isAggregate() || isTupleLike(Type)))
        Parts.assign(List->inits().begin(), List->inits().end());
    }
    if (!Parts.empty() && RD) {
      St.forgetTree(L);
      if (isStdClass(RD, "tuple")) {
        for (unsigned I = 0; I < Parts.size(); ++I)
          assign(L.child(Selector::tupleElement(I)), Parts[I]->getType(),
                 Parts[I], Loc, St);
        return;
      }
      unsigned I = 0;
      for (const FieldDecl *Field : RD->fields()) {
        if (I >= Parts.size())
          break;
        assign(L.child(Selector::field(Field)), Field->getType(), Parts[I++],
               Loc, St);
      }
      return;
    }
    // `auto [values, indices] = t.topk(k)`: each tensor of a LibTorch
    // tuple, computed where its operands are.
    if (RD && isStdClass(RD, "tuple")) {
      llvm::SmallVector<std::pair<unsigned, ValueFacts>, 2> Elements;
      for (unsigned I = 0; std::optional<ValueFacts> F =
                               tensorTupleElement(*Stripped, I, St);
           ++I)
        Elements.push_back({I, *F});
      if (!Elements.empty()) {
        St.forgetTree(L);
        for (auto &[I, F] : Elements)
          St.set(L.child(Selector::tupleElement(I)), F);
        return;
      }
    }
    if ((isTupleLike(Type) || (RD && !isTorchValueType(Type))) &&
        assignCallResult(L, Stripped, St))
      return;
    // A user class built here: what its constructor does to its members.
    if (const auto *Construct = dyn_cast<CXXConstructExpr>(Stripped);
        Construct && RD && !isTorchValueType(Type) && !isTupleLike(Type) &&
        !isCallableType(Type) && !isStringType(Type)) {
      transferConstruction(*Construct, L, St);
      return;
    }
  }
  assignValue(L, Type, Init, Loc, St);
}

} // namespace clang::tidy::torch
