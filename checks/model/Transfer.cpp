//===--- Transfer.cpp - torch-tidy ----------------------------------------===//
//
// FlowModel::transfer: how statements change the state. Declarations and
// assignments write locations (Assign.cpp), accumulations and container
// inserts join into them, RAII guards switch autograd for their scope (the
// end of a scope: Construction.cpp), CUDA and CPU selections are recorded
// on the path, and branches narrow the state with what their condition
// proves.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "ProgramModel.h"
#include "Summary.h"
#include "api/Autocast.h"
#include "api/Devices.h"
#include "api/Losses.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "api/Training.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/AST/StmtCXX.h"
#include "llvm/ADT/StringSwitch.h"

namespace clang::tidy::torch {

namespace {

/// A container or buffer class whose storage is ordinary heap memory.
bool isHostBufferClass(QualType T) {
  const CXXRecordDecl *RD = T.getNonReferenceType()->getAsCXXRecordDecl();
  if (!RD || !RD->getIdentifier())
    return false;
  llvm::StringRef N = RD->getName();
  return (RD->isInStdNamespace() &&
          (N == "vector" || N == "array" || N == "basic_string" ||
           N == "unique_ptr")) ||
         N == "Mat"; // cv::Mat
}

} // namespace

Pinning FlowModel::userMemoryPinning(const Expr *Data) const {
  if (!Data)
    return Pinning::Unknown;
  Data = Data->IgnoreParenCasts();
  // `&buf[0]`, `&buf`
  if (const auto *UO = dyn_cast<UnaryOperator>(Data);
      UO && UO->getOpcode() == UO_AddrOf)
    Data = UO->getSubExpr()->IgnoreParenCasts();
  if (const auto *Sub = dyn_cast<CXXOperatorCallExpr>(Data);
      Sub && Sub->getOperator() == OO_Subscript)
    Data = Sub->getArg(0)->IgnoreParenCasts();
  if (const auto *Sub = dyn_cast<ArraySubscriptExpr>(Data))
    Data = Sub->getBase()->IgnoreParenCasts();
  // `buf.data()`, `mat.ptr<T>()`, `mat.data`
  const Expr *Object = nullptr;
  if (const auto *Call = dyn_cast<CXXMemberCallExpr>(Data)) {
    if (const CXXMethodDecl *MD = Call->getMethodDecl();
        MD && MD->getIdentifier() &&
        (MD->getName() == "data" || MD->getName() == "ptr" ||
         MD->getName() == "get"))
      Object = Call->getImplicitObjectArgument();
  } else if (const auto *ME = dyn_cast<MemberExpr>(Data)) {
    if (!ME->isArrow())
      Object = ME->getBase();
  } else {
    Object = Data;
  }
  if (!Object)
    return Pinning::Unknown;
  Object = Object->IgnoreParenImpCasts();
  const auto *Ref = dyn_cast<DeclRefExpr>(Object);
  const auto *Var = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
  if (!Var)
    return isHostBufferClass(Object->getType()) && isa<MemberExpr>(Object)
               ? Pinning::Pageable
               : Pinning::Unknown;
  if (PinnedHostPointers.contains(Var))
    return Pinning::Pinned;
  QualType T = Var->getType();
  if (isHostBufferClass(T) || T->isConstantArrayType())
    return Pinning::Pageable;
  // A pointer this function allocated: `new float[n]`, `malloc(n)`.
  if (T->isPointerType() && Var->hasLocalStorage() && !isa<ParmVarDecl>(Var) &&
      Var->getInit()) {
    const Expr *Init = Var->getInit()->IgnoreParenCasts();
    if (isa<CXXNewExpr>(Init))
      return Pinning::Pageable;
    if (const auto *Call = dyn_cast<CallExpr>(Init))
      if (const FunctionDecl *FD = Call->getDirectCallee())
        if (FD->getIdentifier() &&
            (FD->getName() == "malloc" || FD->getName() == "calloc"))
          return Pinning::Pageable;
  }
  return Pinning::Unknown;
}

//===--- Statements --------------------------------------------------------===//

void FlowModel::recordCudaSelection(const Expr &Use, State &St) const {
  PathFacts &P = St.path();
  if (P.Cuda == CudaGuard::Checked || P.hasUncheckedCuda(&Use))
    return;
  P.UncheckedCuda.push_back({&Use, P.Cuda});
}

/// On a graph, or on whatever graph the callers' value is on.
static bool mayHoldGraph(const ValueFacts &V) {
  return V.Graph.Value == GraphState::InGraph ||
         (V.Graph.Value == GraphState::Unknown && V.Graph.Entry);
}

void FlowModel::appendToContainer(const Location &Elements, const Expr *Value,
                                  const Stmt &At, State &St) const {
  if (!Elements)
    return;
  ValueFacts V = evaluate(Value, St);
  // An element whose graph is kept from an earlier iteration makes the
  // container carry it; so may a caller's value (a value with no graph
  // drops the source again, see instantiate()).
  if (mayHoldGraph(V) && !llvm::is_contained(V.GraphSources, &At))
    V.GraphSources.push_back(&At);
  // Elements nothing tracks may hold anything already; the graphs they keep
  // are still theirs.
  const ValueFacts *Old = St.lookup(Elements);
  // A part of the elements (a map's mapped values) of an empty container.
  ValueFacts Nothing;
  Nothing.Empty = true;
  // The container is no longer empty: its elements (the whole, and the
  // part written) hold what was inserted.
  if (!Old && Elements.Depth > 1)
    if (const ValueFacts *Whole = St.lookup(Elements.parent());
        Whole && Whole->Empty) {
      Old = &Nothing;
      St.set(Elements.parent(), V);
    }
  joinElementParts(Elements, *Value, At.getBeginLoc(), Old && Old->Empty, St);
  St.set(Elements, joinFacts(Old ? *Old : ValueFacts(), V));
}

void FlowModel::joinElementParts(const Location &Elements, const Expr &Value,
                                 SourceLocation Loc, bool WasEmpty,
                                 State &St) const {
  // A struct, pair or tuple element: its parts, as a declaration sets them,
  // join the elements' parts.
  QualType Type = Value.getType().getNonReferenceType();
  if (isTensorType(Type) || !(isTupleLike(Type) || Type->isRecordType()) ||
      containerRecord(Type))
    return;
  State New = St;
  New.forgetTree(Elements);
  assign(Elements, Type, &Value, Loc, New);
  for (const Location &Part : St.tree(Elements))
    if (Part != Elements && !New.lookup(Part))
      St.forget(Part);
  for (const Location &Part : New.tree(Elements)) {
    if (Part == Elements)
      continue;
    const ValueFacts *OldPart = St.lookup(Part);
    St.set(Part, WasEmpty ? New.get(Part)
                          : joinFacts(OldPart ? *OldPart : ValueFacts(),
                                      New.get(Part)));
  }
}

bool FlowModel::assignTied(const CXXOperatorCallExpr &Op, State &St) const {
  const auto *Tie = dyn_cast<CallExpr>(stripConversions(Op.getArg(0)));
  const FunctionDecl *FD = Tie ? Tie->getDirectCallee() : nullptr;
  if (!FD || !FD->isInStdNamespace() || !FD->getIdentifier() ||
      FD->getName() != "tie")
    return false;
  // `std::tie(a, b) = f()`: each variable takes its element of the tuple.
  State Scratch = St;
  Location Tuple = Location::returned();
  Scratch.forgetTree(Tuple);
  const Expr *Value = Op.getArg(1);
  assign(Tuple, Value->getType(), Value, Op.getExprLoc(), Scratch);
  for (unsigned I = 0; I < Tie->getNumArgs(); ++I) {
    Location To = locationOf(stripConversions(Tie->getArg(I)));
    if (!To)
      continue;
    St.forgetTree(To);
    Location From = Tuple.child(Selector::tupleElement(I));
    for (const Location &Part : Scratch.tree(From))
      if (Location In = Part.replacePrefix(From, To))
        St.set(In, Scratch.get(Part));
  }
  return true;
}

void FlowModel::transfer(const Stmt &S, State &St) const {
  trackRecoveries(S, St);
  // A call that leaves out a device parameter whose default is CUDA
  // (`torch::Device device = torch::kCUDA`) selects CUDA where it runs.
  if (const auto *Default = dyn_cast<CXXDefaultArgExpr>(&S)) {
    const Expr *Literal = stripToDeviceLiteral(Default->getExpr());
    QualType Type = Default->getParam()->getType();
    if (Literal && (isDeviceType(Type) || isDeviceTypeEnum(Type)) &&
        classifyDeviceLiteral(*Literal) == DeviceLiteralKind::CUDA)
      recordCudaSelection(*Literal, St);
    return;
  }
  if (const auto *E = dyn_cast<Expr>(&S);
      E && (isa<DeclRefExpr, StringLiteral>(E))) {
    DeviceLiteralKind Kind = classifyDeviceLiteral(*E);
    if (Kind != DeviceLiteralKind::None &&
        Program.deviceLiteralUse(*E, *Owner) == DeviceLiteralUse::Selection) {
      if (Kind == DeviceLiteralKind::CUDA)
        recordCudaSelection(*E, St);
      else if (!llvm::is_contained(St.path().CpuSelections, E))
        St.path().CpuSelections.push_back(E);
    }
    return;
  }

  if (const auto *DS = dyn_cast<DeclStmt>(&S)) {
    for (const Decl *D : DS->decls()) {
      const auto *VD = dyn_cast<VarDecl>(D);
      if (!VD)
        continue;
      if (isAutocastGuard(*VD, options())) {
        PathFacts &P = St.path();
        P.Autocast = AutocastState::On;
        P.AutocastParam = nullptr;
        P.AutocastStart = {&S, Ctx.getSourceManager().getExpansionLoc(
                                   VD->getLocation())};
        P.AutocastHalf = P.CudaAutocastHalf == Tri::Yes;
        P.AutocastHalfAsEntry = P.CudaDtypeAsEntry;
        P.AutocastIf.assign(P.ConditionsHeld.begin(), P.ConditionsHeld.end());
      }
      // A loop that calls each element of a container of callables of
      // unknown contents (the callers' hooks): they may reset gradients, and
      // nothing proves a run with no element.
      if (CallingLoopRanges.contains(VD) && VD->getInit())
        if (std::optional<ValueFacts> Elements =
                evaluateOperand(*VD->getInit(), St);
            !Elements || !Elements->CallablesKnown)
          unknownCodeMayReset(St.path());
      if (ResettingLoopRanges.contains(VD)) {
        St.path().StepsWithoutReset.clear();
        St.path().GradientsResetSinceEntry = true;
        St.path().BackwardsNotStepped.clear();
        St.path().GradientsSettledSinceEntry = true;
      }
      switch (gradGuardEffect(*VD, Ctx, options())) {
      case GradGuardEffect::None:
        break;
      case GradGuardEffect::Disables:
      case GradGuardEffect::Enables:
      case GradGuardEffect::Unknown: {
        PathFacts &P = St.path();
        P.GradGuards.push_back({VD, P.Grad});
        GradGuardEffect Effect = gradGuardEffect(*VD, Ctx, options());
        P.Grad = Effect == GradGuardEffect::Disables  ? GradMode::Disabled
                 : Effect == GradGuardEffect::Enables ? GradMode::Enabled
                                                      : GradMode::Unknown;
        // A guard is nothing more; an object of the program's that holds
        // one as a member is built as any other (its constructor runs).
        const CXXRecordDecl *RD = VD->getType()->getAsCXXRecordDecl();
        if (!RD || isTorchNamespaceDecl(*RD) ||
            matchesNameList(*RD, options().GuardTypes))
          continue;
        break;
      }
      }
      // A reference names a new object each time it is declared (a loop's
      // batch): what its old binding held goes.
      if (VD->getType()->isReferenceType())
        St.forgetTree(Location::local(VD));
      if (ElementwiseLoopRanges.contains(VD))
        rememberUnvisited(*VD, St);
      // A reference bound to a temporary owns it (`auto &&__range` of
      // `for (auto &x : make_clips())`): it holds the value.
      const Expr *Init = VD->getInit();
      if (const auto *EWC = dyn_cast_or_null<ExprWithCleanups>(Init))
        Init = EWC->getSubExpr();
      bool OwnsTemporary =
          Init && isa<MaterializeTemporaryExpr>(Init->IgnoreParens());
      // A const reference to what a call returns (`const Device &d =
      // ctx.device()`): nothing else names it here; it holds that value.
      bool NamesReturned = Init && VD->getType()->isReferenceType() &&
                           VD->getType().getNonReferenceType().isConstQualified() &&
                           isa<CallExpr>(Init->IgnoreParenImpCasts()) &&
                           !locationOf(Init);
      if (!isTracked(VD) ||
          (VD->getType()->isReferenceType() && !OwnsTemporary &&
           !NamesReturned) ||
          !VD->hasLocalStorage())
        continue;
      assign(Location::local(VD), VD->getType(), VD->getInit(),
             VD->getLocation(), St);
    }
    return;
  }
  if (const auto *BO = dyn_cast<BinaryOperator>(&S)) {
    if (BO->getOpcode() == BO_Assign)
      assignTo(*BO->getLHS(), BO->getRHS(), BO->getExprLoc(), St);
    else if (BO->isCompoundAssignmentOp())
      St.forget(locationOf(BO->getLHS()));
    return;
  }
  if (const auto *UO = dyn_cast<UnaryOperator>(&S)) {
    if (UO->isIncrementDecrementOp())
      St.forget(locationOf(UO->getSubExpr()));
    else if (EscapingMemberAddresses.contains(UO))
      St.forgetTree(locationOf(UO->getSubExpr()));
    return;
  }
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&S)) {
    OverloadedOperatorKind K = Op->getOperator();
    if (K == OO_Equal && Op->getNumArgs() == 2 && assignTied(*Op, St))
      return;
    if (K == OO_Equal && Op->getNumArgs() == 2) {
      // `p.mutable_grad() = torch::Tensor();` resets a gradient.
      if (isGradientReset(*Op, options()))
        transferGradientState(*Op, nullptr, St);
      Location L = locationOf(Op->getArg(0));
      bool Update = L && readsLocation(Op->getArg(1), L);
      assignTo(*Op->getArg(0), Op->getArg(1), Op->getExprLoc(), St);
      // `total = total + loss`: the new value keeps the old one's graph, and
      // this update's: an accumulation.
      if (Update && isTensorType(Op->getArg(0)->getType()))
        if (const ValueFacts *New = St.lookup(L);
            New && mayHoldGraph(*New) &&
            !llvm::is_contained(New->GraphSources, &S)) {
          ValueFacts F = *New;
          F.GraphSources.push_back(&S);
          St.set(L, F);
        }
      return;
    }
    if ((K == OO_PlusEqual || K == OO_MinusEqual || K == OO_StarEqual ||
         K == OO_SlashEqual) &&
        Op->getNumArgs() == 2 && isTensorType(Op->getArg(0)->getType())) {
      Location L = locationOf(Op->getArg(0));
      if (!L)
        return;
      const ValueFacts *Old = St.lookup(L);
      // A caller's part keeps what the caller's storage held.
      ValueFacts Acc = heldForUpdate(L, St);
      ValueFacts Rhs = evaluate(Op->getArg(1), St);
      if (isGradientRescale(*Op))
        St.path().GradientsRescaled = true;
      // `l += other_mean` stays a mean loss; a scaling makes it another.
      bool Sum = K == OO_PlusEqual || K == OO_MinusEqual;
      Acc.MeanLoss = Sum && Acc.MeanLoss == Tri::Yes && Rhs.MeanLoss == Tri::Yes
                         ? Tri::Yes
                         : Tri::Unknown;
      // The sum keeps the right side's graphs (a backward() of it
      // backpropagates them) and, for `+=`, is a source itself.
      auto Keep = [&] {
        unite<const Stmt *>(Acc.GraphSources, Rhs.GraphSources);
        if (K == OO_PlusEqual && !llvm::is_contained(Acc.GraphSources, &S))
          Acc.GraphSources.push_back(&S);
      };
      if (Rhs.Graph.Value == GraphState::InGraph) {
        Acc.Graph = {GraphState::InGraph, Op->getExprLoc()};
        Keep();
      } else if (Rhs.Graph.Value == GraphState::Unknown && Rhs.Graph.Entry &&
                 Acc.Graph.Value != GraphState::InGraph) {
        // What the callers hand over decides: a value on a graph makes the
        // sum keep it (the caller's facts replace the entry tag; a value
        // with no graph drops the sources again, see instantiate()).
        Acc.Graph = Rhs.Graph;
        Keep();
      } else if (Rhs.Graph.Value != Acc.Graph.Value) {
        Acc.Graph = {};
      }
      Acc.Empty = false;
      if (L.isElement() && Old)
        St.set(L, joinFacts(*Old, Acc));
      else
        St.set(L, Acc);
      return;
    }
  }
  if (const auto *Call = dyn_cast<CallExpr>(&S)) {
    transferCall(*Call, St);
    return;
  }
}

bool FlowModel::readsLocation(const Expr *E, const Location &L) const {
  if (!E)
    return false;
  if (const auto *Sub = dyn_cast<Expr>(E); Sub && locationOf(Sub) == L)
    return true;
  for (const Stmt *Child : E->children())
    if (const auto *C = dyn_cast_or_null<Expr>(Child);
        C && !isa<LambdaExpr>(C) && readsLocation(C, L))
      return true;
  return false;
}

void FlowModel::initializeMember(const CXXCtorInitializer &Init,
                                 State &St) const {
  // `Derived(d) : Base(d)`: the base constructor sets the base's members
  // of this object.
  if (Init.isBaseInitializer()) {
    if (const auto *Construct = dyn_cast_or_null<CXXConstructExpr>(
            Init.getInit() ? Init.getInit()->IgnoreImplicit() : nullptr))
      transferConstruction(*Construct, Location::thisObject(), St);
    return;
  }
  const FieldDecl *Field = Init.getMember();
  if (!Field || !Init.getInit())
    return;
  const Expr *Value = Init.getInit();
  if (const auto *Default = dyn_cast<CXXDefaultInitExpr>(Value))
    Value = Default->getExpr();
  // `Net net_;` default-constructs; `model_()` too.
  const Expr *Stripped = Value->IgnoreImplicit();
  // A member's constructor runs (an autocast guard switches it on).
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(Stripped))
    if (Construct->getConstructor()->isUserProvided() &&
        Construct->getConstructor()->isDefined())
      applyAutocastSummary(*Construct,
                           Program.summary(*Construct->getConstructor()), St);
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(Stripped);
      Construct && Construct->getNumArgs() == 0 &&
      !Construct->getConstructor()->isImplicit())
    Value = nullptr;
  else if (const auto *Construct = dyn_cast<CXXConstructExpr>(Stripped);
           Construct && Construct->getNumArgs() == 0)
    Value = isModuleHandleType(Field->getType()) ||
                    isTensorType(Field->getType()) ||
                    containerRecord(Field->getType())
                ? nullptr
                : Value;
  assign(Location::member(Field), Field->getType(), Value,
         Value ? Value->getExprLoc() : Init.getSourceLocation(), St);
}

const Expr *FlowModel::freshTerm(const Expr *E, const Location &Into) const {
  E = stripConversions(E);
  if (!isTensorType(E->getType()))
    return nullptr;
  if (!readsLocation(E, Into))
    return E;
  const auto *Op = dyn_cast<CXXOperatorCallExpr>(E);
  if (!Op || Op->getNumArgs() != 2)
    return nullptr;
  switch (Op->getOperator()) {
  case OO_Plus:
  case OO_Minus:
  case OO_Star:
  case OO_Slash:
    for (const Expr *Arg : {Op->getArg(1), Op->getArg(0)})
      if (const Expr *Fresh = freshTerm(Arg, Into))
        return Fresh;
    return nullptr;
  default:
    return nullptr;
  }
}

const Expr *FlowModel::addedTerm(const Expr *Update,
                                 const Location &Into) const {
  const auto *Op = dyn_cast<CXXOperatorCallExpr>(stripConversions(Update));
  if (!Op || Op->getNumArgs() != 2 || !isTensorType(Op->getType()))
    return nullptr;
  bool ReadsLeft = readsLocation(Op->getArg(0), Into);
  bool ReadsRight = readsLocation(Op->getArg(1), Into);
  if (!ReadsLeft && !ReadsRight)
    return nullptr;
  if (ReadsLeft && ReadsRight) {
    // `c = c + 0.1 * (v - c)` (a running mean): the term of the update that
    // does not read the accumulator.
    for (const Expr *Side : {Op->getArg(1), Op->getArg(0)})
      if (const Expr *Fresh = freshTerm(Side, Into))
        return Fresh;
    return nullptr;
  }
  const Expr *Old = ReadsLeft ? Op->getArg(0) : Op->getArg(1);
  const Expr *Other = ReadsLeft ? Op->getArg(1) : Op->getArg(0);
  switch (Op->getOperator()) {
  case OO_Plus:
  case OO_Minus:
    // The term that does not read the accumulator is what is added, or
    // deeper, `0.9 * c + (0.1 * v + w)` counts once.
    return isTensorType(Other->getType()) ? Other : addedTerm(Old, Into);
  case OO_Star:
  case OO_Slash:
    // A scaling of the update: `(c * n + v) / (n + 1)`.
    return addedTerm(Old, Into);
  default:
    return nullptr;
  }
}

bool FlowModel::matchAccumulation(const Stmt &S, Accumulation &Out) const {
  Out = Accumulation();
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&S)) {
    if (Op->getNumArgs() != 2 || !isTensorType(Op->getArg(0)->getType()))
      return false;
    if (Op->getOperator() == OO_PlusEqual) {
      Out.Into = Op->getArg(0);
      Out.Value = Op->getArg(1);
    } else if (Op->getOperator() == OO_Equal) {
      // `c = c + v`, `c = 0.9 * c + 0.1 * v`, `c = (c * n + v) / (n + 1)`.
      Location Into = locationOf(Op->getArg(0));
      if (!Into)
        return false;
      Out.Into = Op->getArg(0);
      Out.Value = addedTerm(Op->getArg(1), Into);
    }
  } else if (const auto *Call = dyn_cast<CXXMemberCallExpr>(&S)) {
    const CXXMethodDecl *MD = Call->getMethodDecl();
    const Expr *Object = Call->getImplicitObjectArgument();
    if (!MD || !MD->getIdentifier() || !Object)
      return false;
    llvm::StringRef Name = MD->getName();
    if (isTensorType(Object->getType())) {
      if (Name == "add_" && Call->getNumArgs() >= 1) {
        Out.Into = Object;
        Out.Value = Call->getArg(0);
      }
    } else if ((containerRecord(Object->getType()) && isContainerInsert(Name)) ||
               matchesNameList(*MD, options().AccumulatingFunctions)) {
      for (const Expr *Arg : Call->arguments())
        if (isTensorType(Arg->getType()))
          Out.Value = Arg;
      Out.Into = Object;
      Out.How = containerRecord(Object->getType()) ? Accumulation::Append
                                                   : Accumulation::Store;
    }
  }
  return Out.Into && Out.Value && isTensorType(Out.Value->getType()) &&
         !S.getBeginLoc().isMacroID();
}

} // namespace clang::tidy::torch
