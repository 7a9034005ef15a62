//===--- Evaluate.cpp - torch-tidy ----------------------------------------===//
//
// FlowModel::evaluate: the facts of the value an expression computes.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "ProgramModel.h"
#include "Summary.h"
#include "api/Devices.h"
#include "api/Losses.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "support/UserCodeParents.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/StmtCXX.h"
#include "llvm/ADT/StringSwitch.h"

namespace clang::tidy::torch {

/// The declaration that names a symbolic device held at \p L. None for a
/// part of a member (`this->placement_.device_`): its field would read as a
/// member of `*this` where the value travels.
static const NamedDecl *holderOf(const Location &L) {
  for (unsigned I = L.Depth; I-- > 0;)
    if (const FieldDecl *F = Selector::fromRaw(L.Path[I]).asField())
      return F;
  return L.Root;
}

/// The function a callable expression names: a lambda's call operator, or
/// a function named or whose address is taken (`step`, `&step`).
/// The function a callable expression holds: a lambda, a function's name
/// or address, a member function's address (`&Trainer::step`), or
/// `std::bind` of one whose arguments are the call's, in order (a member
/// function's object first). \p OnThis: that object is `this`.
static const FunctionDecl *callableExpression(const Expr &E, bool &OnThis) {
  OnThis = false;
  if (const auto *Lambda = dyn_cast<LambdaExpr>(&E))
    return Lambda->getCallOperator();
  if (const auto *Bind = dyn_cast<CallExpr>(&E); Bind && isStdBind(*Bind)) {
    bool Ignored = false;
    const FunctionDecl *Target =
        callableExpression(*stripConversions(Bind->getArg(0)), Ignored);
    if (!Target)
      return nullptr;
    const auto *Method = dyn_cast<CXXMethodDecl>(Target);
    bool NeedsObject =
        Method && !Method->isStatic() && !Method->getParent()->isLambda();
    unsigned First = NeedsObject ? 2 : 1;
    if (Bind->getNumArgs() != First + Target->getNumParams())
      return nullptr;
    for (unsigned I = First; I < Bind->getNumArgs(); ++I)
      if (placeholderIndex(*Bind->getArg(I)) != I - First + 1)
        return nullptr; // arguments bound or reordered: not followed
    if (NeedsObject) {
      const Expr *Object = stripConversions(Bind->getArg(1));
      if (const auto *Deref = dyn_cast<UnaryOperator>(Object);
          Deref && Deref->getOpcode() == UO_Deref)
        Object = Deref->getSubExpr()->IgnoreParenImpCasts();
      OnThis = isa<CXXThisExpr>(Object);
    }
    return Target;
  }
  const Expr *Named = &E;
  if (const auto *Address = dyn_cast<UnaryOperator>(&E);
      Address && Address->getOpcode() == UO_AddrOf)
    Named = Address->getSubExpr()->IgnoreParenImpCasts();
  if (const auto *Ref = dyn_cast<DeclRefExpr>(Named)) {
    const auto *Function = dyn_cast<FunctionDecl>(Ref->getDecl());
    const auto *Method = dyn_cast_or_null<CXXMethodDecl>(Function);
    // A member function by name alone is a call of it, not a value.
    if (Function && (!Method || Named != &E))
      return Function;
  }
  return nullptr;
}

/// The pointer \p E dereferences: `*p` for a raw or smart pointer.
static const Expr *dereferencedPointer(const Expr &E) {
  if (const auto *UO = dyn_cast<UnaryOperator>(&E);
      UO && UO->getOpcode() == UO_Deref)
    return UO->getSubExpr()->IgnoreParenImpCasts();
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&E);
      Op && Op->getOperator() == OO_Star && Op->getNumArgs() == 1)
    return Op->getArg(0)->IgnoreParenImpCasts();
  return nullptr;
}

/// The variable, member or global that \p E names, if it names one.
static const NamedDecl *declarationNamed(const Expr &E) {
  if (const auto *Ref = dyn_cast<DeclRefExpr>(&E))
    return isa<VarDecl>(Ref->getDecl()) ? Ref->getDecl() : nullptr;
  if (const auto *Member = dyn_cast<MemberExpr>(&E))
    return isa<FieldDecl, VarDecl>(Member->getMemberDecl())
               ? Member->getMemberDecl()
               : nullptr;
  return nullptr;
}

/// `*it` or `it->` on a torch::data loader's iterator.
static bool derefsLoaderIterator(const Expr *E) {
  const auto *Op = dyn_cast<CXXOperatorCallExpr>(E->IgnoreParenImpCasts());
  return Op && (Op->getOperator() == OO_Star || Op->getOperator() == OO_Arrow) &&
         Op->getNumArgs() == 1 && isDataIteratorType(Op->getArg(0)->getType());
}

/// Whether \p Var holds a batch a torch::data loader made: the element of a
/// range-for over the loader, or a copy of `*it`.
static bool isLoaderBatch(const VarDecl &Var, ASTContext &Ctx) {
  if (!isDataExampleType(Var.getType()))
    return false;
  if (Var.getInit() && derefsLoaderIterator(stripConversions(Var.getInit())))
    return true;
  for (const auto &Parent : userCodeParents(Var, Ctx))
    if (const auto *DS = Parent.get<DeclStmt>())
      for (const auto &GrandParent : userCodeParents(*DS, Ctx))
        if (const auto *For = GrandParent.get<CXXForRangeStmt>())
          if (For->getLoopVarStmt() == DS)
            return true;
  return false;
}

SourceLocation loaderBatchOrigin(const Expr &E, ASTContext &Ctx) {
  const auto *Member = dyn_cast<MemberExpr>(E.IgnoreParenImpCasts());
  const auto *Field =
      Member ? dyn_cast<FieldDecl>(Member->getMemberDecl()) : nullptr;
  if (!Field || !isTensorType(E.getType()) ||
      (Field->getName() != "data" && Field->getName() != "target"))
    return {};
  const Expr *Base = stripConversions(Member->getBase());
  if (derefsLoaderIterator(Base))
    return Base->getBeginLoc();
  const auto *Ref = dyn_cast<DeclRefExpr>(Base);
  const auto *Batch = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
  return Batch && isLoaderBatch(*Batch, Ctx) ? Batch->getLocation()
                                             : SourceLocation();
}

static ValueFacts loaderBatchFacts(SourceLocation Origin) {
  ValueFacts F;
  F.Device = {DeviceValue::cpu(), Origin};
  F.MinDims = 1; // stacked examples: a batch dimension
  F.Pin = {Pinning::Pageable, Origin};
  F.Graph = {GraphState::NoGraph, Origin};
  return F;
}

/// \p L, a part of a member of `*this` that \p Function, a constructor,
/// binds to one of its parameters: that part of the parameter.
static Location boundInConstructor(const Location &L,
                                   const FunctionDecl *Function,
                                   ProgramModel &Program) {
  const auto *Ctor = dyn_cast_or_null<CXXConstructorDecl>(Function);
  const FieldDecl *Field =
      Ctor && L.Kind == Location::This && L.Depth
          ? Selector::fromRaw(L.Path[0]).asField()
          : nullptr;
  if (!Field)
    return {};
  std::optional<unsigned> Index = Program.boundParameter(*Ctor, *Field);
  if (!Index || *Index >= Ctor->getNumParams())
    return {};
  return L.replacePrefix(Location::member(Field),
                         Location::local(Ctor->getParamDecl(*Index)));
}

ValueFacts FlowModel::evaluateLocation(const Expr &E, const Location &L,
                                       const State &S) const {
  if (const ValueFacts *F = S.lookup(L)) {
    // An element of a container that is empty so far reads as nothing yet
    // (the bottom): a loop that copies it before the loop that fills it has
    // converged must not make the copy unknown.
    ValueFacts Read = *F;
    Read.KeepsCallerFacts = false;
    if (isModuleHandleType(E.getType()))
      withClassFacts(Read, E.getType());
    // A device variable whose paths disagree (a constant on one): the
    // symbolic device "whatever it holds", as for one never assigned.
    if ((isDeviceType(E.getType()) || isDeviceTypeEnum(E.getType())) &&
        !Read.Device.Value.isKnown() && !Read.Device.Entry)
      if (const NamedDecl *Holder = holderOf(L))
        Read.Device = {DeviceValue::symbolic(Holder), E.getBeginLoc()};
    return Read;
  }
  // In a constructor, a member bound to a parameter (`m_(m)`) reads as it.
  if (Location Bound = boundInConstructor(L, Function, Program))
    if (S.lookup(Bound))
      return evaluateLocation(E, Bound, S);
  ValueFacts F;
  if (isModuleHandleType(E.getType()))
    withClassFacts(F, E.getType());
  if (L.Kind == Location::Global)
    if (const auto *Global = dyn_cast<VarDecl>(L.Root))
      F = Program.globalFacts(*Global, L);
  // A torch::Device that is not a known constant: the symbolic device
  // "whatever it holds".
  if ((isDeviceType(E.getType()) || isDeviceTypeEnum(E.getType())) &&
      !F.Device.Value.isKnown())
    if (const NamedDecl *Holder = holderOf(L)) {
      F.Device = {DeviceValue::symbolic(Holder), E.getBeginLoc()};
      return F;
    }
  if (SourceLocation Batch = loaderBatchOrigin(E, Ctx); Batch.isValid())
    return loaderBatchFacts(Batch);
  if (std::optional<ValueFacts> Part = enclosingModuleFacts(L, S)) {
    if (Part->Device.Value.isKnown() || Part->Device.Entry)
      F.Device = Part->Device;
    if (Part->Mode.Value != ModuleMode::Unknown || Part->Mode.Entry) {
      F.Mode = Part->Mode;
      F.ModeLayers = Part->ModeLayers;
    }
  }
  return F;
}

ValueFacts FlowModel::heldForUpdate(const Location &L, const State &St) const {
  if (const ValueFacts *F = St.lookup(L))
    return *F;
  ValueFacts F;
  // A part of the caller's storage (a parameter's, or the object's this
  // method runs on): what the change does not establish stays the caller's.
  const auto *P = dyn_cast_or_null<ParmVarDecl>(L.Root);
  F.KeepsCallerFacts = L.Depth > 0 &&
                       ((L.Kind == Location::Local && P &&
                         P->getDeclContext() == Function) ||
                        (L.Kind == Location::This && Function &&
                         !isa<CXXConstructorDecl>(Function)));
  return F;
}

ValueFacts FlowModel::evaluate(const Expr *E, const State &S) const {
  ValueFacts F;
  // Invalid code can leave an expression without a type.
  if (!E || E->getType().isNull() || E->containsErrors())
    return F;
  E = stripConversions(E);
  if (E->getType().isNull())
    return F;
  if (const auto *Cond = dyn_cast<ConditionalOperator>(E))
    return joinFacts(evaluate(Cond->getTrueExpr(), S),
                     evaluate(Cond->getFalseExpr(), S));
  // A CUDA ordinal written out (`1`, `"cuda:1"`, a string built from one):
  // where it is written travels with the value. A constant (`constexpr int
  // kGpu = 1;`) is no storage: its value is its initialiser's.
  const auto *Constant =
      isa<DeclRefExpr>(E) ? dyn_cast<VarDecl>(cast<DeclRefExpr>(E)->getDecl())
                          : nullptr;
  if (Constant ? Constant->isConstexpr() && Constant->getInit()
               : isa<IntegerLiteral, StringLiteral, CXXConstructExpr,
                     CXXFunctionalCastExpr>(E)) {
    bool IsString = isStringType(E->getType());
    int64_t Ordinal = 0;
    if (Constant && !locationOf(E)) {
      ValueFacts Init = evaluate(Constant->getInit(), S);
      F.OrdinalSpelled = Init.OrdinalSpelled;
      F.SpelledOrdinal = Init.SpelledOrdinal;
    } else if (const Expr *Literal = ordinalLiteral(E, Ordinal, IsString);
               Literal && Ordinal > 0 &&
               (IsString || E->getType()->isIntegerType())) {
      F.OrdinalSpelled = Literal->getBeginLoc();
      F.SpelledOrdinal = Ordinal;
    }
    // An int's scalar facts and a device literal's device are added below,
    // to F; a string has nothing else to know.
    if (IsString && F.OrdinalSpelled.isValid() && !isDeviceLiteral(E))
      return F;
  }
  // An enumerator of the program's own written with its value (`kEvalCard
  // = 2`): as a constant. (LibTorch's `DeviceType::CUDA = 1` is no ordinal.)
  if (const auto *Ref = dyn_cast<DeclRefExpr>(E))
    if (const auto *Enumerator = dyn_cast<EnumConstantDecl>(Ref->getDecl());
        Enumerator && Enumerator->getInitExpr() &&
        !isTorchNamespaceDecl(*Enumerator) &&
        !isSystemHeaderDecl(*Enumerator, Ctx.getSourceManager())) {
      ValueFacts Init = evaluate(Enumerator->getInitExpr(), S);
      F.OrdinalSpelled = Init.OrdinalSpelled;
      F.SpelledOrdinal = Init.SpelledOrdinal;
    }
  // A call that returns the caller's storage is that storage for its parts;
  // its value is what its summary returns.
  if (Location L = locationOf(E);
      L && (!isa<CallExpr>(E) || !Program.summaryForCall(*E)))
    return evaluateLocation(*E, L, S);
  if (SourceLocation Batch = loaderBatchOrigin(*E, Ctx); Batch.isValid())
    return loaderBatchFacts(Batch);
  // `out.toTensor()`, `out.toTuple()->elements()[0]`: what the TorchScript
  // value holds.
  if (const Expr *Source = scriptValueSource(*E))
    return evaluate(Source, S);
  if (isTensorType(E->getType()))
    if (ValueFacts Part = evaluatePartOfResult(E, S); !Part.isUnknown())
      return Part;
  if (isScalarType(E->getType())) {
    F.Scalar = evaluateScalar(E, S);
    if (!isa<CallExpr>(E))
      return F;
  }
  if (isDeviceLiteral(E)) {
    F.Device = evaluateDeviceSpec(E, S);
    return F;
  }
  if (isDeviceType(E->getType()))
    if (const Expr *Pointer = dereferencedPointer(*E)) {
      // `&d`: the variable itself.
      if (const auto *Ref = dyn_cast<DeclRefExpr>(Pointer))
        if (const auto *Var = dyn_cast<VarDecl>(Ref->getDecl());
            Var && Var->getType()->isPointerType() && Var->getInit())
          if (const auto *Address = dyn_cast<UnaryOperator>(
                  Var->getInit()->IgnoreParenImpCasts());
              Address && Address->getOpcode() == UO_AddrOf)
            return evaluate(Address->getSubExpr(), S);
      // A torch::Device held by pointer (`Device *`, `shared_ptr<Device>`),
      // like one held by value: a device variable.
      if (const NamedDecl *Holder = declarationNamed(*Pointer)) {
        F.Device = {DeviceValue::symbolic(Holder), E->getBeginLoc()};
        return F;
      }
    }
  if (isTensorOptionsType(E->getType()))
    return evaluateOptions(E, S);
  if (const auto *BO = dyn_cast<BinaryOperator>(E)) {
    if (BO->isAssignmentOp() || BO->getOpcode() == BO_Comma)
      return evaluate(BO->getOpcode() == BO_Comma ? BO->getRHS() : BO->getLHS(),
                      S);
    return F;
  }
  bool OnThis = false;
  if (const FunctionDecl *Function = callableExpression(*E, OnThis)) {
    F.setCallable(Function, OnThis);
    return F;
  }
  ModuleCall MC;
  if (matchModuleCall(*E, MC))
    return evaluateModuleCall(*E, MC, S);
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E)) {
    switch (Op->getOperator()) {
    case OO_Subscript:
      // `t[i]`: a view of the receiver (its device, memory, graph), one
      // dimension less.
      if (Op->getNumArgs() == 2 && isTensorType(Op->getType()) &&
          isTensorType(Op->getArg(0)->getType())) {
        F = evaluate(Op->getArg(0), S);
        F.MinDims = 0;
        F.Empty = false;
        return F;
      }
      // `t.chunk(2)[0]`: an element of a LibTorch call's tensor list.
      if (Op->getNumArgs() == 2 && isTensorType(Op->getType()))
        if (std::optional<ValueFacts> Element =
                tensorTupleElement(*Op->getArg(0), 0, S))
          return *Element;
      // `net->parameters()[0]`: an element of a container a call returns.
      if (Op->getNumArgs() == 2 && isTensorType(Op->getType()))
        if (std::optional<ValueFacts> Element =
                evaluateOperand(*Op->getArg(0), S))
          return *Element;
      return F;
    case OO_Plus:
    case OO_Minus:
    case OO_Star:
    case OO_Slash:
    case OO_Less:
    case OO_Greater:
    case OO_LessEqual:
    case OO_GreaterEqual:
    case OO_EqualEqual:
    case OO_ExclaimEqual:
    case OO_Amp:
    case OO_Pipe:
    case OO_Caret:
    case OO_Tilde:
    case OO_Exclaim:
      if (Op->getNumArgs() == 2 && isTensorType(Op->getType()))
        return evaluateOperator(*E, {Op->getArg(0), Op->getArg(1)}, S);
      if (Op->getNumArgs() == 1 && isTensorType(Op->getType()))
        return evaluateOperator(*E, {Op->getArg(0)}, S);
      return F;
    case OO_PlusEqual:
    case OO_MinusEqual:
    case OO_StarEqual:
    case OO_SlashEqual:
    case OO_Equal:
      return evaluate(Op->getArg(0), S);
    default:
      break;
    }
  }
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(E))
    return evaluateConstruction(*Construct, S);
  if (const auto *Call = dyn_cast<CallExpr>(E)) {
    ValueFacts R = evaluateCall(*Call, S);
    if (!F.Scalar.empty())
      R.Scalar = F.Scalar;
    return R;
  }
  return F;
}

std::optional<ValueFacts>
FlowModel::tupleGetOfTensorCall(const CallExpr &Call, const State &S) const {
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD || !FD->isInStdNamespace() || !FD->getIdentifier() ||
      FD->getName() != "get" || Call.getNumArgs() != 1)
    return std::nullopt;
  const TemplateArgumentList *Args = FD->getTemplateSpecializationArgs();
  if (!Args || Args->size() < 1 ||
      (*Args)[0].getKind() != TemplateArgument::Integral)
    return std::nullopt;
  return tensorTupleElement(
      *Call.getArg(0), unsigned((*Args)[0].getAsIntegral().getZExtValue()), S);
}

std::optional<ValueFacts> FlowModel::evaluateOperand(const Expr &E,
                                                     const State &S) const {
  if (isTensorType(E.getType()))
    return evaluate(&E, S);
  const Expr *Container = stripConversions(&E);
  if (!operandContainerRecord(Container->getType()))
    return std::nullopt;
  Location C = locationOf(Container);
  // A temporary container (`std::vector<Tensor>(first, last)`): its
  // elements as a declaration would set them.
  State Scratch;
  if (!C) {
    Scratch = S;
    C = Location::returned();
    assign(C, Container->getType(), Container, E.getExprLoc(), Scratch);
  }
  return evaluateLocation(E, C.child(Selector::element()),
                          C.Kind == Location::Return ? Scratch : S);
}

} // namespace clang::tidy::torch
