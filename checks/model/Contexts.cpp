//===--- Contexts.cpp - torch-tidy ----------------------------------------===//
//
// Top-down: what the callers of a function establish at its entry. Each
// call is looked at in its caller's own context analysis; the facts every
// call agrees on (CUDA checked, autograd off, a parameter's device, a
// member's pending copy) become the function's entry state, and a call made
// inside a loop, or on every training step, makes the function run there.
// A function with no caller starts where the program starts: nothing
// checked, autograd on; when the program has a main, a function main never
// reaches has no known entry at all.
//
//===----------------------------------------------------------------------===//

#include "FlowAnalysis.h"
#include "ProgramModel.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "support/UserCodeParents.h"

namespace clang::tidy::torch {

/// Whether the lambda \p Op, which captured `this` in a method of its
/// class, runs on the object of \p Caller, a method of that class.
static bool runsOnCallersObject(const CXXMethodDecl &Op,
                                const FunctionDecl &Caller) {
  const CXXMethodDecl *Enclosing = enclosingMethodOfLambda(Op);
  const auto *Method = dyn_cast<CXXMethodDecl>(&Caller);
  return Enclosing && Method && !Method->isStatic() &&
         !Method->getParent()->isLambda() &&
         (Method->getParent() == Enclosing->getParent() ||
          Method->getParent()->isDerivedFrom(Enclosing->getParent()));
}

/// The entry values a call hands to \p F: its parameters, the members of
/// `*this` (of the class of \p Object when it derives from F's: a CRTP
/// base's method reaches the derived class's members through its
/// `static_cast`), the variables a lambda captures.
static llvm::SmallVector<const ValueDecl *, 8>
entryValues(const FunctionDecl &F, const Expr *Object = nullptr) {
  llvm::SmallVector<const ValueDecl *, 8> Out;
  for (const ParmVarDecl *P : F.parameters())
    Out.push_back(P);
  if (const auto *Method = dyn_cast<CXXMethodDecl>(&F)) {
    if (Method->getParent()->isLambda()) {
      for (const LambdaCapture &C : Method->getParent()->captures())
        if (C.capturesVariable()) {
          if (const auto *VD = dyn_cast<VarDecl>(C.getCapturedVar()))
            Out.push_back(VD);
        } else if (C.capturesThis()) {
          // `[this]`: the members of the object the enclosing method runs on.
          if (const CXXMethodDecl *Enclosing = enclosingMethodOfLambda(*Method))
            for (const FieldDecl *Field : fieldsWithBases(*Enclosing->getParent()))
              Out.push_back(Field);
        }
    } else if (!Method->isStatic() && !isa<CXXConstructorDecl>(Method)) {
      const CXXRecordDecl *Class = Method->getParent();
      QualType ObjectType =
          Object ? Object->IgnoreParenImpCasts()->getType().getNonReferenceType()
                 : QualType();
      if (!ObjectType.isNull() && ObjectType->isPointerType())
        ObjectType = ObjectType->getPointeeType();
      if (const CXXRecordDecl *Dynamic =
              ObjectType.isNull() ? nullptr : ObjectType->getAsCXXRecordDecl();
          Dynamic && Dynamic->hasDefinition() &&
          Dynamic->isDerivedFrom(Class))
        Class = Dynamic;
      for (const FieldDecl *Field : fieldsWithBases(*Class))
        Out.push_back(Field);
    }
  }
  return Out;
}

static Location entryLocationOf(const ValueDecl &D) {
  if (const auto *Field = dyn_cast<FieldDecl>(&D))
    return Location::member(Field);
  return Location::local(D.getCanonicalDecl() == &D ? &D : &D);
}

/// What the program start establishes.
static PathFacts programStart() {
  PathFacts P;
  P.Cuda = CudaGuard::Unguarded;
  P.Grad = GradMode::Enabled;
  P.Autocast = AutocastState::Off;
  P.setCudaDtype(Tri::Yes); // CUDA autocast's default dtype
  return P;
}

const EntryContext &ProgramModel::entryContext(const FunctionDecl &F) {
  const FunctionDecl *Key = F.getCanonicalDecl();
  if (auto It = Contexts.find(Key); It != Contexts.end())
    return *It->second;
  // A cycle of callers: this caller's call adds nothing (a greatest
  // fixpoint); the result is not kept.
  static const EntryContext Nothing = [] {
    EntryContext C;
    C.Root = false;
    return C;
  }();
  if (ContextsInProgress.contains(Key))
    return Nothing;
  ContextsInProgress.insert(Key);
  Cuts Before = cuts();
  EntryContext C = computeEntryContext(F);
  ContextsInProgress.erase(Key);
  if (!keepable(Before) || !C.Complete) {
    TransientContexts.push_back(std::make_unique<EntryContext>(std::move(C)));
    return *TransientContexts.back();
  }
  return *Contexts.try_emplace(Key, std::make_unique<EntryContext>(std::move(C)))
              .first->second;
}

/// The calls that may run \p F: its own, and for a virtual method those of
/// the methods it overrides (a call through the base may dispatch here).
static llvm::SmallVector<CallSite, 4> callsThatMayRun(const FunctionDecl &F,
                                                      ProgramModel &Program) {
  llvm::SmallVector<const FunctionDecl *, 4> Targets{&F};
  if (isa<CXXMethodDecl>(F))
    for (size_t I = 0; I < Targets.size(); ++I)
      for (const CXXMethodDecl *Base :
           cast<CXXMethodDecl>(Targets[I])->overridden_methods())
        if (!llvm::is_contained(Targets, Base))
          Targets.push_back(Base);
  llvm::SmallVector<CallSite, 4> Out;
  for (const FunctionDecl *Target : Targets)
    llvm::append_range(Out, Program.callSitesOf(*Target));
  return Out;
}

/// A thread's start as a call of \p F, the function it runs: the arguments
/// after the function's (the object first, for a member function), each
/// taken out of `std::ref`.
static ResolvedCall threadStartCall(const Expr &Start, const FunctionDecl &F,
                                    const FlowModel &M) {
  ResolvedCall Call;
  Call.Call = &Start;
  Call.Callee = &F;
  llvm::ArrayRef<const Expr *> Args = threadStartArguments(Start).drop_front();
  auto Unwrapped = [](const Expr *E) {
    const Expr *S = stripConversions(E)->IgnoreImplicit();
    if (const auto *Ref = dyn_cast<CallExpr>(S))
      if (const FunctionDecl *FD = Ref->getDirectCallee();
          FD && FD->isInStdNamespace() && FD->getIdentifier() &&
          (FD->getName() == "ref" || FD->getName() == "cref") &&
          Ref->getNumArgs() == 1)
        return Ref->getArg(0);
    return E;
  };
  const auto *Method = dyn_cast<CXXMethodDecl>(&F);
  if (Method && Method->isInstance() && !Method->getParent()->isLambda() &&
      !Args.empty()) {
    const Expr *Object = Unwrapped(Args.front());
    Args = Args.drop_front();
    Call.ObjectExpr = Object;
    Call.Object = Object->getType()->isPointerType()
                      ? M.pointeeLocation(Object)
                      : M.locationOf(Object);
  }
  for (const Expr *Arg : Args)
    Call.Arguments.push_back(Unwrapped(Arg));
  return Call;
}

/// What lambda \p Lambda holds of the variable \p D it captured, and of its
/// parts (fields, elements), where it runs through a callable away from its
/// creator: a copy holds the value at the creation; a reference names the
/// variable, which holds that value or, later, what the creator leaves in
/// it. None when a creation is not in \p D's own function.
static std::optional<std::map<Location, ValueFacts>>
captureAtCreation(const FunctionDecl &Lambda, const VarDecl &D,
                  ProgramModel &Program) {
  std::optional<std::map<Location, ValueFacts>> Out;
  Location Root = Location::local(&D);
  for (const CallSite &Site : Program.creationSitesOf(Lambda)) {
    const auto *Creation = dyn_cast_or_null<LambdaExpr>(Site.Call);
    if (!Creation || !Site.Caller || D.getDeclContext() != Site.Caller)
      return std::nullopt;
    const LambdaCapture *Capture = nullptr;
    for (const LambdaCapture &C : Creation->captures())
      if (C.capturesVariable() && C.getCapturedVar() == &D)
        Capture = &C;
    const FlowAnalysis *A = Program.analysis(*Site.Caller);
    std::optional<State> Before = A ? A->stateBefore(*Creation) : std::nullopt;
    if (!Capture || !Before)
      return std::nullopt;
    std::vector<State> Held = {*Before};
    if (Capture->getCaptureKind() == LCK_ByRef)
      for (State &End : A->endStates())
        Held.push_back(std::move(End));
    // The locations any of those states knows under the variable.
    std::map<Location, ValueFacts> Here;
    for (const State &S : Held)
      for (const Location &Part : S.tree(Root))
        Here.emplace(Part, ValueFacts());
    Here.emplace(Root, ValueFacts());
    bool ByReference = Capture->getCaptureKind() == LCK_ByRef;
    for (auto &[Part, V] : Here) {
      std::optional<ValueFacts> Joined;
      for (const State &S : Held) {
        ValueFacts Now = S.get(Part).withoutEntries();
        Joined = Joined ? joinFacts(*Joined, Now) : Now;
      }
      V = *Joined;
      // A part's mode, through a reference, is whatever the functions on
      // the way switched it to (`with_mode(*det.ae, false, [&] {...})`
      // runs the lambda on a module it put in evaluation mode).
      if (ByReference && Part != Root) {
        V.Mode = {};
        V.ModeIf = {};
      }
    }
    if (!Out) {
      Out = std::move(Here);
      continue;
    }
    for (auto &[Part, V] : *Out) {
      auto It = Here.find(Part);
      V = joinFacts(V, It != Here.end() ? It->second : ValueFacts());
    }
  }
  return Out;
}

EntryContext ProgramModel::computeEntryContext(const FunctionDecl &F) {
  EntryContext C;
  State Parametric = parametricEntry(F);
  C.Entry = Parametric;
  const auto *Method = dyn_cast<CXXMethodDecl>(&F);
  bool IsLambda = Method && Method->getParent()->isLambda();
  if (F.isMain()) {
    C.Entry.path() = programStart();
    return C;
  }
  // A function that picks a device itself counts as guarded.
  if (isDeviceSelector(F, options())) {
    C.Root = false;
    C.Entry.path().Cuda = CudaGuard::Checked;
    return C;
  }
  llvm::SmallVector<CallSite, 4> MayRun = callsThatMayRun(F, *this);
  llvm::ArrayRef<CallSite> Sites = MayRun;
  // A lambda nothing calls directly runs where the std::functions that hold
  // it are called; when none is seen (it is handed to user code that keeps
  // it out of sight), where it is written, as far as anyone can tell.
  llvm::SmallVector<CallSite, 2> ThroughCallables;
  if (Sites.empty() && IsLambda) {
    ThroughCallables = callableCallSitesOf(F);
    Sites = ThroughCallables.empty() ? creationSitesOf(F)
                                     : llvm::ArrayRef(ThroughCallables);
    C.OnlyWhereWritten = ThroughCallables.empty();
  }
  // A function whose address is taken (`&f`, `&Trainer::step`, bound by
  // std::bind) runs where the callables that hold it are called too.
  bool AddressTaken = !IsLambda && isAddressTaken(F);
  if (AddressTaken) {
    ThroughCallables = callableCallSitesOf(F);
    MayRun.append(ThroughCallables.begin(), ThroughCallables.end());
    Sites = MayRun;
  }
  // Called through a pointer that no call of the TU shows, or through a
  // base that none shows: callers no one sees.
  bool Escapes = (AddressTaken && ThroughCallables.empty()) ||
                 (Sites.empty() && Method && Method->isVirtual());
  // Asked in an audit's first phase too: other TUs' calls may change the
  // context (the planner compares it with this TU's own). A run outside an
  // audit exports nothing and skips the USR.
  std::optional<EntryContext> External;
  if (Config.External || Config.WholeProgram) {
    std::string USR = usrOf(F);
    Reads.Entries.insert(USR);
    if (Config.External)
      External = Config.External->entry(USR, F, *this);
  }
  if (Sites.empty() || (Escapes && External)) {
    if (External) {
      External->Root = false;
      External->NoCallJudges = !Escapes;
      // The callers in other TUs seldom name this object's members: where
      // they know nothing of one, the class state stands.
      State Merged = C.Entry;
      External->Entry.forEach([&](const Location &L, const ValueFacts &V) {
        const ValueFacts *Own = L.Kind == Location::This ? Merged.lookup(L) : nullptr;
        if (!Own) {
          Merged.set(L, V);
          return;
        }
        ValueFacts Joined = V;
        if (!V.Device.Value.isKnown())
          Joined.Device = Own->Device;
        Merged.set(L, Joined);
      });
      Merged.path() = External->Entry.path();
      External->Entry = std::move(Merged);
      return *External;
    }
    if (Escapes) {
      C.Root = false;
      C.Entry.path().Grad = GradMode::Unknown;
      return C;
    }
    // No caller: the program starts here, unless the whole program (an
    // audit sees it) has a main that does not reach it. One TU alone cannot
    // tell: another may call it.
    C.Root = true;
    if (!F.isMain() && programDefinesMain()) {
      // Unreachable: no path of the program gets here unguarded.
      C.Entry.path().Grad = GradMode::Enabled;
      C.Entry.path().Cuda = CudaGuard::Checked;
    } else
      C.Entry.path() = programStart();
    return C;
  }

  C.Root = false;
  bool First = true;
  std::optional<State> Joined;
  int64_t MaxCount = 0;
  const Expr *MaxProof = nullptr;
  for (const CallSite &Site : Sites) {
    if (!Site.Caller) {
      // A namespace-scope initialiser runs before main.
      State Start = Parametric;
      Start.path() = programStart();
      Joined = Joined ? (Joined->joinWith(Start), *Joined) : Start;
      if (!C.UncheckedCall) {
        C.UncheckedCall = Site.Call;
        C.UncheckedPathStart = &F;
        C.UncheckedPathCall = Site.Call;
      }
      continue;
    }
    const FunctionDecl *CallerDef = Site.Caller;
    if (ContextsInProgress.contains(CallerDef->getCanonicalDecl()))
      continue; // recursion: the other callers decide
    if (isAnalysing(*CallerDef)) {
      C.Complete = false;
      continue;
    }
    const FlowAnalysis *A = analysis(*CallerDef);
    if (!A)
      continue;
    std::optional<State> Before = Site.Destroyed
                                      ? A->stateAtDestruction(*Site.Destroyed)
                                      : A->stateBefore(*Site.Call);
    if (!Before)
      continue; // not reached
    const FlowModel &M = A->model();
    ResolvedCall Call;
    if (Site.Destroyed) {
      Call.Call = Site.Call;
      Call.Callee = &F;
      Call.Object = Location::local(Site.Destroyed);
    } else if (Site.ThreadStart) {
      Call = threadStartCall(*Site.Call, F, M);
    } else {
      Call = M.resolve(*Site.Call, *Before);
      // A callable that may hold F among others runs F with these arguments.
      if (const auto *ThroughCallable = dyn_cast<CallExpr>(Site.Call);
          ThroughCallable && Call.Callee != &F &&
          llvm::is_contained(
              M.possibleCallableTargets(*ThroughCallable, *Before), &F))
        Call = M.resolveAs(*ThroughCallable, F, *Before);
    }
    // A virtual call whose target is not certain may run F: as far as F's
    // context goes, F is what it runs. One certain to run another does not.
    if (const auto *Direct = dyn_cast<CallExpr>(Site.Call)
                                 ? cast<CallExpr>(Site.Call)->getDirectCallee()
                                 : nullptr;
        Direct && isa<CXXMethodDecl>(Direct) &&
        cast<CXXMethodDecl>(Direct)->isVirtual()) {
      if (!Call.Callee &&
          (Direct->getCanonicalDecl() == F.getCanonicalDecl() ||
           llvm::is_contained(overridersOf(*cast<CXXMethodDecl>(Direct)), &F)))
        Call.Callee = &F;
      else if (Call.Callee &&
               Call.Callee->getCanonicalDecl() != F.getCanonicalDecl())
        continue;
    }
    State Here = Parametric;
    Here.path().Cuda = Before->path().Cuda;
    Here.path().Grad = Before->path().Grad;
    Here.path().CountAtLeast = Before->path().CountAtLeast;
    Here.path().CountProof = Before->path().CountProof;
    // A caller's parameter means nothing here.
    Here.path().Autocast =
        Before->path().Autocast == AutocastState::AsParameter
            ? AutocastState::Unknown
            : Before->path().Autocast;
    Here.path().AutocastStart = Before->path().AutocastStart;
    Here.path().AutocastHalf = Before->path().AutocastHalf;
    Here.path().setCudaDtype(Before->path().CudaAutocastHalf);
    // A new thread starts with its own modes: autograd on, autocast off.
    if (Site.ThreadStart) {
      Here.path().Grad = GradMode::Enabled;
      Here.path().Autocast = AutocastState::Off;
      Here.path().AutocastStart = {};
      Here.path().AutocastHalf = false;
      Here.path().AutocastIf.clear();
      Here.path().setCudaDtype(programStart().CudaAutocastHalf);
    }
    // A lambda defined and called inside a guarded scope: its creation
    // point's guard holds too (it is a must-fact).
    for (const ValueDecl *D : entryValues(F, Call.ObjectExpr)) {
      ValueFacts V;
      if (IsLambda && isa<VarDecl>(D) &&
          D->getDeclContext() == CallerDef) {
        Location L = Location::local(D);
        const ValueFacts *Known = Before->lookup(L);
        V = Known ? *Known : ValueFacts();
        if (QualType T = D->getType().getNonReferenceType();
            Known && isModuleHandleType(T))
          M.withClassFacts(V, T);
      } else if (IsLambda && isa<FieldDecl>(D) &&
                 runsOnCallersObject(*Method, *CallerDef)) {
        // A member of the `this` it captured, run by a method of its class
        // (through std::visit, a member std::function): what that method's
        // object holds, where it says (else the class state stays).
        Location L = Location::member(cast<FieldDecl>(D));
        for (const Location &Part : Before->tree(L))
          if (Part != L)
            Here.set(Part, Before->get(Part).withoutEntries());
        if (const ValueFacts *Held = Before->lookup(L))
          Here.set(L, asEntryValue(Held->withoutEntries(), *D));
        continue;
      } else if (std::optional<std::map<Location, ValueFacts>> Captured =
                     IsLambda && isa<VarDecl>(D) &&
                             !Site.Destroyed && !Site.ThreadStart
                         ? captureAtCreation(F, *cast<VarDecl>(D), *this)
                         : std::nullopt) {
        Location Root = Location::local(D);
        V = (*Captured)[Root];
        if (QualType T = D->getType().getNonReferenceType();
            isModuleHandleType(T))
          M.withClassFacts(V, T);
        // Its parts as the creator held them (the caller's storage is not
        // the creator's).
        for (const auto &[Part, Facts] : *Captured)
          if (Part != Root)
            Here.set(Part, Facts);
        Location L = entryLocationOf(*D);
        Here.set(L, asEntryValue(V, *D));
        continue;
      } else {
        V = M.entryValueAt(*D, Call, *Before);
      }
      Location L = entryLocationOf(*D);
      if (!isa<FieldDecl>(D) || !V.isUnknown())
        Here.set(L, asEntryValue(V, *D));
      // Its parts (fields, elements) as the caller's storage holds them.
      std::optional<State> Temporary;
      if (Location There = M.callerStorage(L, Call, *Before, Temporary)) {
        const State &Caller = Temporary ? *Temporary : *Before;
        auto CopyParts = [&](const Location &From, const Location &To) {
          for (const Location &Part : Caller.tree(From))
            if (Part != From)
              if (Location In = Part.replacePrefix(From, To))
                Here.set(In, Caller.get(Part).withoutEntries());
        };
        CopyParts(There, L);
        // Its members that name the caller's objects: those objects.
        for (const auto &[Member, Target] : M.boundMembers(There)) {
          Location InCallee = Member.replacePrefix(There, L);
          ValueFacts V = Caller.get(Target).withoutEntries();
          if (QualType T = Member.last().asField()->getType().getNonReferenceType();
              isModuleHandleType(T))
            M.withClassFacts(V, T);
          Here.set(InCallee, V);
          CopyParts(Target, InCallee);
        }
      }
    }
    // The globals the caller knows, parts included: what they hold at the
    // call (`g_norm` that main set before it calls normalise()).
    Before->forEach([&](const Location &L, const ValueFacts &V) {
      if (L.Kind == Location::Global)
        Here.set(L, V.withoutEntries());
    });
    // A member function bound to the caller's `this` runs on another object
    // here, unless the call runs on the same one.
    if (Call.Object != Location::thisObject()) {
      llvm::SmallVector<std::pair<Location, ValueFacts>, 2> Rebound;
      Here.forEach([&](const Location &L, const ValueFacts &V) {
        if (V.CallablesOnThis)
          Rebound.push_back({L, V});
      });
      for (auto &[L, V] : Rebound) {
        V.CallablesOnThis = false;
        Here.set(L, V);
      }
    }
    const EntryContext &CallerContext = entryContext(*CallerDef);
    if (Here.path().Cuda != CudaGuard::Checked && !C.UncheckedCall) {
      C.UncheckedCall = Site.Call;
      // The path goes on through the caller's own unchecked caller.
      bool CallerStarts = CallerContext.Root || !CallerContext.UncheckedCall;
      C.UncheckedPathStart =
          CallerStarts ? CallerDef : CallerContext.UncheckedPathStart;
      C.UncheckedPathCall =
          CallerStarts ? Site.Call : CallerContext.UncheckedPathCall;
    }
    if (Here.path().CountAtLeast > MaxCount) {
      MaxCount = Here.path().CountAtLeast;
      MaxProof = Here.path().CountProof;
    }
    // Where the callee runs: in this call's loop, or wherever its caller
    // runs when the call runs on every call of the caller.
    // A thread runs beside its starter's loops, not in them.
    LoopContext Loop =
        Site.ThreadStart ? LoopContext() : A->loopContext(*Site.Call);
    if (!Site.ThreadStart)
      inheritLoopContext(Loop, CallerContext.Loop);
    C.Complete &= CallerContext.Complete;
    if (Loop.TrainingLoop.isValid() && C.Loop.TrainingLoop.isInvalid()) {
      C.Loop.TrainingLoop = Loop.TrainingLoop;
      C.Loop.TrainingCall = Loop.TrainingCall;
      C.Loop.TrainingCallee = Loop.TrainingCallee;
      C.LoopCall = Site.Call;
    }
    if (Loop.Loop.isValid() && C.Loop.Loop.isInvalid()) {
      C.Loop.Loop = Loop.Loop;
      C.Loop.LoopWithoutBackward = Loop.LoopWithoutBackward;
      if (!C.LoopCall)
        C.LoopCall = Site.Call;
    }
    if (First) {
      Joined = std::move(Here);
      First = false;
    } else {
      Joined->joinWith(Here);
    }
  }
  C.CountAtLeast = MaxCount;
  C.CountProof = MaxProof;
  C.NoCallJudges = llvm::all_of(
      Sites, [](const CallSite &Site) {
        // A destructor's run and a thread's start judge nothing of it.
        return Site.Destroyed != nullptr || Site.ThreadStart;
      });
  if (Joined && Escapes) {
    // Callers no one sees may hand anything: of what the seen calls agree
    // on, only the autograd mode stands (a training loop calling a hook
    // through a pointer does not tell what the hook's arguments are), and
    // only when no caller's analysis was cut short.
    GradMode Grad = Joined->path().Grad;
    C.Entry.path().Grad =
        C.Complete && Grad != GradMode::Entry ? Grad : GradMode::Unknown;
    return C;
  }
  if (Joined) {
    C.Entry = std::move(*Joined);
    // The calls that the analysis saw are all the calls; one TU of an audit
    // may not see the others: its audit facts join in.
    if (External) {
      C.Entry.joinWith(External->Entry);
      if (External->CountAtLeast > C.CountAtLeast)
        C.CountAtLeast = External->CountAtLeast;
    }
  }
  return C;
}

llvm::SmallVector<CallSite, 2>
ProgramModel::callableCallSitesOf(const FunctionDecl &F) {
  buildCallGraph();
  llvm::SmallVector<CallSite, 2> Out;
  for (const CallSite &Site : CallableCalls) {
    if (Site.Caller->getCanonicalDecl() == F.getCanonicalDecl() ||
        ContextsInProgress.contains(Site.Caller->getCanonicalDecl()))
      continue;
    const FlowAnalysis *A = analysis(*Site.Caller);
    std::optional<State> Before = A ? A->stateBefore(*Site.Call) : std::nullopt;
    if (!Before)
      continue;
    for (const FunctionDecl *Target : A->model().possibleCallableTargets(
             cast<CallExpr>(*Site.Call), *Before))
      if (Target->getCanonicalDecl() == F.getCanonicalDecl()) {
        Out.push_back(Site);
        break;
      }
  }
  return Out;
}

} // namespace clang::tidy::torch

