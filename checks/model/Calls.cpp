//===--- Calls.cpp - torch-tidy -------------------------------------------===//
//
// FlowModel at calls: what a call does to the state, through the callee's
// summary when it is a user function (ApplySummary.cpp) and through the
// LibTorch vocabulary otherwise. Which function runs is Resolve.cpp's; how
// the callee's facts become the caller's, Instantiate.cpp's; a
// construction, Construction.cpp's.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "ProgramModel.h"
#include "Summary.h"
#include "api/Devices.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "api/Training.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

bool FlowModel::isBlockingDeviceRead(const CallExpr &Call,
                                     const State &S) const {
  HostSync Sync;
  // On a device variable: when it holds CUDA the read waits for the stream,
  // and when it does not, no copy from it was asynchronous.
  return matchHostSync(Call, S, Sync) && Sync.How == HostSync::Read &&
         evaluate(Sync.Tensor, S).Device.Value.mayBeCUDA();
}

/// Whether \p E is one element of a container picked by a constant index:
/// `nets[1]`, `nets.at(0)`, `*nets[1]`.
static bool isConstantIndexed(const Expr &E, const ASTContext &Ctx) {
  const Expr *S = E.IgnoreParenImpCasts();
  if (const auto *Deref = dyn_cast<UnaryOperator>(S);
      Deref && Deref->getOpcode() == UO_Deref)
    S = Deref->getSubExpr()->IgnoreParenImpCasts();
  if (const auto *Star = dyn_cast<CXXOperatorCallExpr>(S);
      Star && (Star->getOperator() == OO_Star ||
               Star->getOperator() == OO_Arrow) && Star->getNumArgs() == 1)
    S = Star->getArg(0)->IgnoreParenImpCasts();
  const Expr *Index = nullptr;
  if (const auto *Sub = dyn_cast<ArraySubscriptExpr>(S))
    Index = Sub->getIdx();
  else if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(S);
           Op && Op->getOperator() == OO_Subscript && Op->getNumArgs() == 2)
    Index = Op->getArg(1);
  else if (const auto *At = dyn_cast<CXXMemberCallExpr>(S);
           At && At->getMethodDecl() && At->getMethodDecl()->getIdentifier() &&
           At->getMethodDecl()->getName() == "at" && At->getNumArgs() == 1)
    Index = At->getArg(0);
  return Index && !Index->isValueDependent() &&
         Index->isIntegerConstantExpr(Ctx);
}

/// The module a call moves, switches or loads into: `net->to(d)`,
/// `net->train()`, `torch::load(net, path, d)`.
static const Expr *moduleArgumentOf(const CallExpr &Call,
                                    llvm::StringRef &Action) {
  if (const Expr *Module = moduleToReceiver(Call)) {
    Action = "to";
    return Module;
  }
  if (const Expr *Module = moduleMethodCallReceiver(Call, "train")) {
    Action = "train";
    return Module;
  }
  if (const Expr *Module = moduleMethodCallReceiver(Call, "eval")) {
    Action = "eval";
    return Module;
  }
  const Expr *Device = nullptr;
  if (const Expr *Module = moduleLoadedBy(Call, Device)) {
    Action = "load";
    return Module;
  }
  return nullptr;
}

void FlowModel::recordBackpropagation(const CallExpr &Call,
                                      const FunctionSummary *Summary,
                                      State &St) const {
  // What the backward passes reach: a callee that knows says through which
  // of its entry values; else the object and every tensor argument.
  llvm::SmallVector<ValueFacts, 4> Reached;
  if (Summary && Summary->BackwardEntriesKnown &&
      !isBackwardCall(Call, options()) && !isGradientCall(Call)) {
    ResolvedCall Resolved = resolve(Call, St);
    for (const ValueDecl *Entry : Summary->BackwardEntries)
      Reached.push_back(entryValueAt(*Entry, Resolved, St));
  } else {
    if (const Expr *Object = memberCallObject(Call))
      Reached.push_back(evaluate(Object, St));
    for (const Expr *Arg : Call.arguments())
      if (!isa<CXXDefaultArgExpr>(Arg) &&
          (isTensorType(Arg->getType()) || containerRecord(Arg->getType())))
        Reached.push_back(evaluate(Arg, St));
  }
  PathFacts &Path = St.path();
  for (const ValueFacts &V : Reached) {
    unite<const Stmt *>(Path.GraphsBackpropagated, V.GraphSources);
    if (V.Graph.Value == GraphState::NoGraph)
      continue;
    if (V.Graph.Entry && V.Graph.Value == GraphState::Unknown &&
        V.GraphSources.empty()) {
      for (const ValueDecl *Entry : {V.Graph.Entry, V.Graph.AlsoEntry})
        if (Entry && !llvm::is_contained(Path.EntriesBackpropagated, Entry))
          Path.EntriesBackpropagated.push_back(Entry);
    } else {
      Path.BackpropagatedOther = true;
    }
  }
}

void FlowModel::exchange(const Expr *A, const Expr *B, State &St) const {
  Location LA = locationOf(A), LB = locationOf(B);
  if (!LA || !LB) {
    for (const Location &L : {LA, LB})
      if (L)
        St.forgetTree(L);
    return;
  }
  // Two elements of one container: it holds what it held.
  if (LA == LB)
    return;
  const State Old = St;
  auto Move = [&](const Location &From, const Location &To) {
    // An element stands for all of them: it gains the other's facts.
    bool Weak = To.isElement();
    if (!Weak)
      St.forgetTree(To);
    for (const Location &Part : Old.tree(From))
      if (Location Into = Part.replacePrefix(From, To))
        St.set(Into, Weak ? joinFacts(Old.get(Into), Old.get(Part))
                          : Old.get(Part));
  };
  Move(LA, LB);
  Move(LB, LA);
}

void FlowModel::transferCall(const CallExpr &Call, State &St) const {
  const FunctionSummary *Summary = summaryAt(Call, St);
  // `std::make_unique<T>(args)` runs T's constructor, which does to the
  // arguments what its summary says (on the object: where an owner takes
  // it, constructOwned), as `new T(args)` does.
  if (!Summary && (isOwnerFactory(Call.getDirectCallee()) ||
                   optionalEmplacedClass(Call)))
    if (ResolvedCall Built = resolve(Call, St);
        const auto *Ctor = dyn_cast_or_null<CXXConstructorDecl>(Built.Callee)) {
      // The constants passed pick the constructor's branch (as for a
      // plain construction, summaryAt).
      Summary = summaryForKnownInputs(Built, St);
      if (!Summary)
        Summary = Program.summary(*Ctor);
    }
  // A virtual call of uncertain target: what training does on the path is
  // what one of the overrides that may run does.
  ProgramModel::Dispatched Dispatched;
  if (!Summary)
    Dispatched = Program.dispatchedSummaries(Call);
  // So does a callable that holds one of several known functions.
  bool ThroughCallable = !Summary && Dispatched.empty() && callableHolder(Call);
  if (ThroughCallable)
    for (const FunctionDecl *Target : possibleCallableTargets(Call, St)) {
      const FunctionSummary *TargetSummary = Program.summary(*Target);
      if (!TargetSummary) {
        Dispatched.clear();
        break;
      }
      Dispatched.push_back({Target, TargetSummary});
    }
  if (!Dispatched.empty()) {
    std::optional<PathFacts> Joined;
    for (const auto &[Override, OverrideSummary] : Dispatched) {
      State Copy = St;
      transferGradientState(Call, OverrideSummary, Copy);
      Joined = Joined ? joinPaths(*Joined, Copy.path()) : Copy.path();
    }
    St.path() = std::move(*Joined);
  } else {
    transferGradientState(Call, Summary, St);
  }
  transferAutocast(Call, Summary, St);
  // A backward pass reaches the graphs its tensors carry; an opaque call
  // may keep them.
  bool Backward = isBackwardCall(Call, options()) || isGradientCall(Call) ||
                  (Summary && Summary->Backward.isValid());
  bool Opaque = !Backward && !Summary && Call.getDirectCallee() &&
                !isLibraryFunction(*Call.getDirectCallee());
  if (Backward)
    recordBackpropagation(Call, Summary, St);
  else if (Opaque) {
    if (const Expr *Object = memberCallObject(Call))
      unite<const Stmt *>(St.path().GraphsEscaped, evaluate(Object, St).GraphSources);
    for (const Expr *Arg : Call.arguments())
      if (isTensorType(Arg->getType()) || containerRecord(Arg->getType()))
        unite<const Stmt *>(St.path().GraphsEscaped, evaluate(Arg, St).GraphSources);
  }
  // After `t.backward()` returns, `t` has a graph: LibTorch throws
  // otherwise.
  if (isBackwardCall(Call, options()))
    if (const Expr *Object = memberCallObject(Call))
      if (Location L = locationOf(backwardSource(Object)))
        if (ValueFacts F = heldForUpdate(L, St);
            F.Graph.Value == GraphState::Unknown) {
          F.Graph = {GraphState::InGraph, Call.getExprLoc()};
          St.set(L, F);
        }
  if (isSynchronizeCall(Call, options()) || isBlockingDeviceRead(Call, St) ||
      (Summary && Summary->MaySynchronize))
    St.completePendingCopies();

  // `.cuda()` selects CUDA; `.cpu()` the CPU.
  if (isTensorCudaCall(Call))
    recordCudaSelection(Call, St);
  else if (isTensorCpuCall(Call) &&
           !llvm::is_contained(St.path().CpuSelections, &Call))
    St.path().CpuSelections.push_back(&Call);

  llvm::StringRef Action;
  if (const Expr *Module = moduleArgumentOf(Call, Action)) {
    Location L = locationOf(Module);
    // A mode switched on a module the analysis cannot name (a layer of
    // `net->children()` held in a local as a plain `Module`) may be any
    // module's. A parameter, a member or a global names its entry value.
    if ((Action == "train" || Action == "eval") &&
        (!L || (L.Kind == Location::Local && !isa<ParmVarDecl>(L.Root) &&
                isErasedModuleType(Module->getType()))))
      forgetModes(St);
    // So may one switched on a copy of a handle whose source is not named
    // (`for (auto net : {a, b}) net->eval();`): that of any module of its
    // class.
    if ((Action == "train" || Action == "eval") && L &&
        L.Kind == Location::Local && !L.Depth && !isa<ParmVarDecl>(L.Root))
      if (const auto *Copy = dyn_cast<VarDecl>(L.Root);
          Copy && isSharedModuleHandleType(Copy->getType()) &&
          copiesAnotherObject(*Copy))
        forgetModes(St, Copy->getType());
    if (!L)
      return;
    ValueFacts F = heldForUpdate(L, St);
    const Expr *LoadDevice = nullptr;
    if (Action == "load")
      moduleLoadedBy(Call, LoadDevice);
    if (Action == "to" || Action == "load") {
      if (const Expr *DeviceArg = Action == "load"
                                      ? LoadDevice
                                      : argumentForParameter(Call, "device")) {
        F.Device = evaluateDeviceSpec(DeviceArg, St);
        F.Device.Origin = Call.getExprLoc();
        F.Device.Via = nullptr;
      } else if (Action == "load") {
        // Each parameter takes the device it was saved from: unknown here.
        F.Device = {};
      }
    } else {
      std::optional<bool> On =
          Call.getNumArgs() ? evaluateBool(Call.getArg(0), St) : true;
      F.Mode = {Action == "eval" || On == false ? ModuleMode::Eval
                : On ? ModuleMode::Train : ModuleMode::Unknown,
                Call.getExprLoc()};
      F.ModeIf = {};
      if (!F.Mode.isKnown()) {
        // `module.train(was_training)`: the mode it was in then; with
        // `module.train(on)`, the callers' `on` decides; with a member
        // (`train(saved_)` in a destructor), what the object holds there.
        ValueFacts Flag = evaluate(Call.getArg(0), St);
        // (A bool parameter's own entry tag is no module's mode: its
        // ParameterTest below is.)
        const ValueDecl *Entry = Flag.Mode.Entry;
        if (Flag.Mode.isKnown() ||
            (Entry && (!isa<ParmVarDecl>(Entry) ||
                       !Entry->getType()
                            .getNonReferenceType()
                            ->isIntegralOrEnumerationType())))
          F.Mode = Flag.Mode;
        else
          F.ModeIf = Flag.ModeIf ? Flag.ModeIf : parameterTest(Call.getArg(0));
      }
      // A container's element (`for (auto net : {a, b}) net->eval();`)
      // may share its module with a handle outside it: theirs is unknown.
      if (QualType Held = L.isElement() && inContainerElement(L)
                              ? locationType(L)
                              : QualType();
          !Held.isNull() && isSharedModuleHandleType(Held))
        forgetModes(St, Held);
      // One element named by a constant index (`nets[1]->eval()`): the
      // others keep theirs, so the elements' mode is known only if theirs
      // was the same.
      if (L.isElement() && isConstantIndexed(*Module, Ctx)) {
        ValueFacts Old = heldForUpdate(L, St);
        if (Old.Mode != F.Mode || !(Old.ModeIf == F.ModeIf)) {
          F.Mode = {};
          F.ModeIf = {};
        }
      }
    }
    St.set(L, F);
    return;
  }
  // `seq->push_back(Dropout(0.5))`: the container now holds such a layer.
  if (const Expr *Container = moduleMethodCallReceiver(Call, "push_back"))
    if (Location L = locationOf(Container);
        L && anyModeLayer({Call.getArgs(), Call.getNumArgs()})) {
      ValueFacts F = heldForUpdate(L, St);
      F.ModeLayers = Tri::Yes;
      St.set(L, F);
    }
  llvm::StringRef Method = tensorMethodName(Call);
  if (Method == "copy_") {
    Location L = locationOf(memberCallObject(Call));
    if (!L)
      return;
    ValueFacts Dest = heldForUpdate(L, St);
    ValueFacts Src = evaluate(Call.getArg(0), St);
    Dest.Graph = Src.Graph.Value == GraphState::InGraph ? Src.Graph : Dest.Graph;
    Dest.clearPendingCopy();
    Dest.Empty = false;
    if (Dest.Device.Value.isCPU() && Src.Device.Value.mayBeCUDA())
      if (std::optional<bool> NB =
              evaluateBool(argumentForParameter(Call, "non_blocking"), St))
        if (*NB)
          Dest.PendingCopy = Call.getExprLoc();
    St.set(L, Dest);
    return;
  }
  // In place: `total.add_(loss)` keeps its operands' graphs (an
  // accumulation); `zero_()` / `fill_()` start afresh.
  if (Method.ends_with("_") && Method != "copy_" && Method != "detach_" &&
      Method != "requires_grad_") {
    Location L = locationOf(memberCallObject(Call));
    if (!L)
      return;
    ValueFacts F = heldForUpdate(L, St);
    F.MeanLoss = Tri::Unknown; // a new value
    if (Method == "zero_" || Method == "fill_") {
      F.GraphSources.clear();
      F.Graph = {GraphState::NoGraph, Call.getExprLoc()};
      St.set(L, F);
      return;
    }
    for (const Expr *Arg : Call.arguments())
      if (isTensorType(Arg->getType())) {
        ValueFacts A = evaluate(Arg, St);
        if (A.Graph.Value == GraphState::InGraph) {
          F.Graph = {GraphState::InGraph, Call.getExprLoc()};
          unite<const Stmt *>(F.GraphSources, A.GraphSources);
          if (Method == "add_" && !llvm::is_contained(F.GraphSources, &Call))
            F.GraphSources.push_back(&Call);
        }
      }
    St.set(L, F);
    return;
  }
  if (Method == "detach_" || Method == "requires_grad_") {
    Location L = locationOf(memberCallObject(Call));
    ValueFacts F = heldForUpdate(L, St);
    F.Graph = {Method == "detach_" ? GraphState::NoGraph : GraphState::Unknown,
               Call.getExprLoc()};
    if (Method == "detach_")
      F.GraphSources.clear();
    St.set(L, F);
    return;
  }
  if (!Method.empty())
    return;

  // Containers: an insert joins into the elements; a reset empties them.
  if (const auto *Member = dyn_cast<CXXMemberCallExpr>(&Call))
    if (const CXXMethodDecl *MD = Member->getMethodDecl();
        MD && MD->getIdentifier()) {
      const Expr *Object = Member->getImplicitObjectArgument();
      bool Container = Object && containerRecord(Object->getType());
      bool Accumulating = matchesNameList(*MD, options().AccumulatingFunctions);
      if ((Container && isContainerInsert(MD->getName())) || Accumulating) {
        // A map's `emplace(k, v)`, `try_emplace(k, v)`,
        // `insert_or_assign(k, v)`: v, whatever its type, is the mapped value
        // of an element; `insert({k, v})` inserts the whole pair.
        bool KeyAndValue =
            Container && Call.getNumArgs() >= 2 &&
            isMapContainer(containerRecord(Object->getType()));
        // `student_.emplace(8, 0.1)`: a module built from its constructor's
        // arguments; an optional then holds only it.
        if (const CXXRecordDecl *Element =
                Container && !KeyAndValue && MD->getName().starts_with("emplace")
                    ? containerValueRecord(Object->getType())
                    : nullptr) {
          QualType ElementType = Ctx.getRecordType(Element);
          bool Built =
              isModuleHandleType(ElementType) &&
              llvm::none_of(Call.arguments(), [&](const Expr *Arg) {
                // (`holders.emplace_back(impl_ptr)` shares a module.)
                return isModuleHandleType(Arg->getType());
              });
          Location C = Built ? locationOf(Object) : Location();
          if (C) {
            Location Elements = C.child(Selector::element());
            ValueFacts Module = newModuleFacts(ElementType, Call.getExprLoc());
            const ValueFacts *Old = St.lookup(Elements);
            bool Replaces = isOptional(Object->getType()) || (Old && Old->Empty);
            ValueFacts Joined =
                Replaces ? Module : joinFacts(Old ? *Old : ValueFacts(), Module);
            St.forgetTree(Elements);
            St.set(Elements, Joined);
            return;
          }
        }
        // `pairs.emplace_back(name, net)`: each argument is a field of the
        // element it builds (a std::pair, an aggregate).
        if (const CXXRecordDecl *Element =
                Container && !KeyAndValue && Call.getNumArgs() >= 2 &&
                        MD->getName().starts_with("emplace")
                    ? containerValueRecord(Object->getType())
                    : nullptr;
            Element && (isStdClass(Element, "pair") || Element->isAggregate()) &&
            std::distance(Element->field_begin(), Element->field_end()) ==
                Call.getNumArgs()) {
          if (Location C = locationOf(Object)) {
            Location Whole = C.child(Selector::element());
            const ValueFacts *Before = St.lookup(Whole);
            bool WasEmpty = Before && Before->Empty;
            ValueFacts Nothing;
            Nothing.Empty = true;
            unsigned Index = 0;
            for (const FieldDecl *Field : Element->fields()) {
              Location Part = Whole.child(Selector::field(Field));
              if (WasEmpty)
                St.set(Part, Nothing);
              appendToContainer(Part, Call.getArg(Index++), Call, St);
            }
            if (WasEmpty)
              St.set(Whole, ValueFacts());
          }
          return;
        }
        const Expr *Value = nullptr;
        for (const Expr *Arg : Call.arguments())
          if (isTensorType(Arg->getType()) || !Value || KeyAndValue)
            Value = Arg;
        if (Value)
          if (Location C = locationOf(Object)) {
            Location Elements = C.child(Selector::element());
            if (KeyAndValue)
              if (const FieldDecl *Second = mappedField(Object->getType()))
                Elements = Elements.child(Selector::field(Second));
            appendToContainer(Elements, Value, Call, St);
          }
        // The project says what its accumulator does: that is all.
        return;
      }
      // `amp.reset()` on a std::optional: the object it held is destroyed
      // (a guard restores what it saved).
      if (Container && MD->getName() == "reset" &&
          isOptional(Object->getType()))
        destroyOwnedObject(Object->getType(), St);
      if (Container && (MD->getName() == "clear" ||
                        (MD->getName() == "reset" &&
                         isOptional(Object->getType())))) {
        ValueFacts Nothing;
        Nothing.Empty = true;
        St.set(locationOf(Object).child(Selector::element()), Nothing);
        return;
      }
      if (Container)
        return;
      // `p.reset(q)`, `p.swap(q)`, `p.release()`: another object, or none.
      if (Object && isOwningPointer(Object->getType()) && !MD->isConst()) {
        if (MD->getName() == "reset")
          destroyOwnedObject(Object->getType(), St);
        if (Location Owner = locationOf(Object))
          if (!(MD->getName() == "reset" && Call.getNumArgs() == 1 &&
                constructOwned(Owner, Call.getArg(0), St)))
            St.forgetTree(Owner);
      }
    }

  if (const Expr *Mode = setGradEnabledArgument(Call)) {
    std::optional<bool> On = evaluateBool(Mode, St);
    St.path().Grad = !On ? GradMode::Unknown
                     : *On ? GradMode::Enabled
                           : GradMode::Disabled;
    return;
  }
  if (const Expr *Count = deviceCountOutArgument(Call)) {
    if (Location L = locationOf(Count)) {
      ValueFacts F;
      F.Scalar.IsDeviceCount = true;
      St.set(L, F);
    }
    return;
  }

  ResolvedCall Resolved = resolve(Call, St);
  if (Summary) {
    applySummary(Resolved, *Summary, Location(), St);
    return;
  }
  // A virtual call of uncertain target does what one of the overrides does;
  // a callable, what one of the functions it may hold does.
  if (!Dispatched.empty()) {
    llvm::SmallVector<Alternative, 2> Results;
    for (const auto &[Override, OverrideSummary] : Dispatched) {
      Alternative A;
      A.After = St;
      ResolvedCall Through = Resolved;
      Through.Callee = Override;
      if (ThroughCallable)
        Through = resolveAs(Call, *Override, St);
      applySummary(Through, *OverrideSummary, Location(), A.After);
      if (const auto *Method = dyn_cast<CXXMethodDecl>(Override);
          Method && !Method->getParent()->isLambda())
        A.Class = Method->getParent();
      Results.push_back(std::move(A));
    }
    St = joinAlternatives(Results);
    return;
  }
  if (isStdSwap(Call)) {
    exchange(Call.getArg(0), Call.getArg(1), St);
    return;
  }
  if (runHandedLambdas(Call, St)) {
    // Its other arguments (the variant, the range) as any library call's.
    ResolvedCall Rest = Resolved;
    llvm::erase_if(Rest.Arguments, [](const Expr *Arg) {
      return Arg && isa<LambdaExpr>(stripConversions(Arg)->IgnoreImplicit());
    });
    forgetOpaqueEffects(Rest, St);
    return;
  }
  forgetOpaqueEffects(Resolved, St);
  // A callable whose contents are unknown may hold any module handle it
  // captured, and switch its mode (a phase callback calling eval()).
  // (A callable the callers hand in, or the one a member holds, is what
  // they know; the elements of a member container of callables, a registry
  // filled from anywhere, no one does.)
  if (const Expr *Holder = callableHolder(Call)) {
    Location L = locationOf(Holder->IgnoreParenImpCasts());
    if (const VarDecl *Element = rangeElementNamed(*Holder))
      if (const Expr *Range = rangeOfElement(*Element))
        L = locationOf(Range).child(Selector::element());
    bool FromParameter = L && L.Kind == Location::Local &&
                         isa_and_nonnull<ParmVarDecl>(L.Root);
    // An element of a container that holds none runs nothing.
    const ValueFacts *Elements = L && L.isElement() ? St.lookup(L) : nullptr;
    if (Elements && Elements->Empty)
      return;
    if (L && L.isElement() ? !FromParameter
                           : !evaluate(Holder, St).dependsOnEntry())
      forgetModes(St);
  }
}

bool FlowModel::runHandedLambdas(const CallExpr &Call, State &St) const {
  const FunctionDecl *FD = Call.getDirectCallee();
  CallableRuns Runs = FD && isLibraryFunction(*FD)
                          ? runsCallableArguments(*FD)
                          : CallableRuns::None;
  // std::visit runs one instantiation, which one the variant decides: the
  // join of what each leaves loses the facts of the object they share (an
  // AMP policy's state), so its call stays opaque. Its instantiations still
  // have it as their caller (CallGraph.cpp).
  if (Runs != CallableRuns::Repeatedly)
    return false;
  llvm::SmallVector<Alternative, 2> Results;
  bool Resets = false;
  for (const Expr *Arg : Call.arguments()) {
    const auto *Lambda =
        dyn_cast<LambdaExpr>(stripConversions(Arg)->IgnoreImplicit());
    if (!Lambda)
      continue;
    // A generic lambda (std::visit's): each instantiation it gets.
    const CXXMethodDecl *Op = Lambda->getCallOperator();
    llvm::SmallVector<const FunctionDecl *, 2> Bodies{Op};
    if (const FunctionTemplateDecl *T = Op->getDescribedFunctionTemplate())
      Bodies.assign(T->specializations().begin(), T->specializations().end());
    for (const FunctionDecl *Body : Bodies) {
      const FunctionSummary *Summary = Program.summary(*Body);
      if (!Summary)
        return false;
      Alternative A;
      A.After = St;
      ResolvedCall R;
      R.Call = &Call;
      R.Callee = Body;
      // `[this]` in this function's own class: its members are ours.
      if (isa_and_nonnull<CXXMethodDecl>(Function) &&
          llvm::any_of(Lambda->captures(), [](const LambdaCapture &C) {
            return C.capturesThis();
          }))
        R.Object = Location::thisObject();
      applySummary(R, *Summary, Location(), A.After);
      applyGradientSummary(Call, *Summary, A.After.path());
      Resets |= Summary->ResetsGradients;
      Results.push_back(std::move(A));
    }
  }
  if (Results.empty())
    return false;
  State Ran = joinAlternatives(Results);
  // An algorithm may run them on no element: the paths join. One that
  // resets gradients runs over the parameters, as a loop over them does:
  // as if it ran at least once.
  if (Runs == CallableRuns::Repeatedly && !Resets)
    St.joinWith(Ran);
  else
    St = std::move(Ran);
  return true;
}

} // namespace clang::tidy::torch
