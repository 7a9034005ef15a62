//===--- DecidingInputs.cpp - torch-tidy ----------------------------------===//
//
// The scalar inputs whose values decide what a function does, and its
// summary where a call knows them: `set_mode(m, Phase::Evaluate)` takes one
// branch, `AmpSwitch fp16(at::kHalf)` keeps float16 in its member, and
// `fp16.enter()` sets autocast's dtype to what its object holds.
//
//===----------------------------------------------------------------------===//

#include "FlowAnalysis.h"
#include "ProgramModel.h"
#include "api/Autocast.h"
#include "api/TorchApi.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

namespace {

/// The storage \p E names in \p F's entry terms: a parameter, `*this`, or
/// a field of one (`cfg.amp`, `dtype_`, `ctx_.mode`); invalid otherwise.
Location inputStorage(const Expr *E, const FunctionDecl &F) {
  if (!E)
    return {};
  E = E->IgnoreParenImpCasts();
  if (const auto *Ref = dyn_cast<DeclRefExpr>(E)) {
    const auto *P = dyn_cast<ParmVarDecl>(Ref->getDecl());
    return P && P->getDeclContext() == &F ? Location::local(P) : Location();
  }
  if (isa<CXXThisExpr>(E))
    return Location::thisObject();
  const auto *Member = dyn_cast<MemberExpr>(E);
  const auto *Field =
      Member ? dyn_cast<FieldDecl>(Member->getMemberDecl()) : nullptr;
  if (!Field)
    return {};
  const Expr *Base = Member->getBase()->IgnoreParenImpCasts();
  // Through a pointer only `this->`: another pointer may point anywhere.
  if (Member->isArrow() && !isa<CXXThisExpr>(Base))
    return {};
  Location L = inputStorage(Base, F);
  if (!L || L.Depth >= Location::MaxDepth)
    return {};
  return L.child(Selector::field(Field));
}

/// A scalar that \p E reads: an input of \p F; invalid otherwise.
Location scalarInput(const Expr &E, const FunctionDecl &F) {
  if (!isScalarType(E.IgnoreParenImpCasts()->getType()))
    return {};
  Location L = inputStorage(&E, F);
  return L && (L.Kind == Location::Local || L.Depth) ? L : Location();
}

class InputFinder {
public:
  InputFinder(const FunctionDecl &F, ProgramModel &Program)
      : F(F), Program(Program) {}

  void scan(const Stmt *S) {
    if (!S)
      return;
    if (const auto *If = dyn_cast<IfStmt>(S))
      addReads(If->getCond());
    else if (const auto *Switch = dyn_cast<SwitchStmt>(S))
      addReads(Switch->getCond());
    else if (const auto *Choice = dyn_cast<ConditionalOperator>(S))
      addReads(Choice->getCond());
    else if (const auto *BO = dyn_cast<BinaryOperator>(S);
             BO && BO->getOpcode() == BO_Assign &&
             isa<MemberExpr>(BO->getLHS()->IgnoreParenImpCasts()))
      addReads(BO->getRHS()); // stored in an object
    else if (const auto *Call = dyn_cast<CallExpr>(S))
      scanCall(*Call);
    else if (const auto *Construct = dyn_cast<CXXConstructExpr>(S))
      passedOn(Construct->getConstructor(),
               llvm::ArrayRef(Construct->getArgs(), Construct->getNumArgs()),
               nullptr);
    for (const Stmt *Child : S->children())
      if (!isa_and_nonnull<LambdaExpr>(Child))
        scan(Child);
  }

  /// A constructor's member initialisers store what they read.
  void scanInitializers(const CXXConstructorDecl &Ctor) {
    for (const CXXCtorInitializer *Init : Ctor.inits())
      if (Init->isWritten() && Init->getInit()) {
        addReads(Init->getInit());
        scan(Init->getInit());
      }
  }

  llvm::SmallVector<Location, 2> Found;

private:
  void add(const Location &L) {
    if (!llvm::is_contained(Found, L))
      Found.push_back(L);
  }

  /// Every input that \p S reads.
  void addReads(const Stmt *S) {
    if (!S)
      return;
    if (const auto *E = dyn_cast<Expr>(S))
      if (Location L = scalarInput(*E, F)) {
        add(L);
        return;
      }
    for (const Stmt *Child : S->children())
      if (!isa_and_nonnull<LambdaExpr>(Child))
        addReads(Child);
  }

  void scanCall(const CallExpr &Call) {
    AutocastSwitch Switch = autocastSwitch(Call);
    if (Switch.What != AutocastSwitch::None) {
      addReads(Switch.Value);
      return;
    }
    if (moduleMethodCallReceiver(Call, "train")) {
      addReads(Call.getNumArgs() ? Call.getArg(0) : nullptr);
      return;
    }
    const FunctionDecl *Callee = Program.calleeOf(Call);
    llvm::ArrayRef<const Expr *> Args(Call.getArgs(), Call.getNumArgs());
    const Expr *Object = nullptr;
    if (const auto *Member = dyn_cast<CXXMemberCallExpr>(&Call))
      Object = Member->getImplicitObjectArgument();
    else if (isa<CXXOperatorCallExpr>(Call) && Callee &&
             isa<CXXMethodDecl>(Callee) && !Args.empty()) {
      Object = Args.front();
      Args = Args.drop_front();
    }
    passedOn(Callee, Args, Object);
  }

  /// The arguments (and the object) a call passes for its callee's own
  /// deciding inputs decide too.
  void passedOn(const FunctionDecl *Callee, llvm::ArrayRef<const Expr *> Args,
                const Expr *Object) {
    if (!Callee || isLibraryFunction(*Callee))
      return;
    for (const Location &In : Program.decidingInputs(*Callee)) {
      Location Base;
      if (In.Kind == Location::This) {
        Base = Object ? inputStorage(Object, F) : Location::thisObject();
      } else if (const auto *P = dyn_cast<ParmVarDecl>(In.Root);
                 P && P->getFunctionScopeIndex() < Args.size()) {
        const Expr *Arg = Args[P->getFunctionScopeIndex()];
        if (!In.Depth) {
          addReads(Arg);
          continue;
        }
        Base = inputStorage(Arg, F);
      }
      if (Base)
        if (Location Here = In.rebased(Base))
          add(Here);
    }
  }

  const FunctionDecl &F;
  ProgramModel &Program;
};

} // namespace

llvm::SmallVector<Location, 2>
ProgramModel::decidingInputs(const FunctionDecl &Function) {
  const FunctionDecl *Definition = definitionOf(Function);
  if (!Definition || !Definition->getBody())
    return {};
  if (auto It = DecidingInputs.find(Definition); It != DecidingInputs.end())
    return It->second;
  // A recursive call sees none while this one is under way.
  DecidingInputs[Definition];
  InputFinder Finder(*Definition, *this);
  Finder.scan(Definition->getBody());
  if (const auto *Ctor = dyn_cast<CXXConstructorDecl>(Definition))
    Finder.scanInitializers(*Ctor);
  llvm::sort(Finder.Found);
  DecidingInputs[Definition] = Finder.Found;
  return Finder.Found;
}

const FunctionSummary *ProgramModel::summaryWithConstants(
    const FunctionDecl &Function,
    llvm::ArrayRef<std::pair<Location, int64_t>> Constants) {
  const FunctionDecl *Definition = definitionOf(Function);
  if (!Definition || !isAnalyzable(*Definition) || isRecursive(Function))
    return summary(Function);
  auto Key = std::make_pair(
      Definition->getCanonicalDecl(),
      std::vector<std::pair<Location, int64_t>>(Constants.begin(),
                                                Constants.end()));
  if (auto It = ConstantSummaries.find(Key); It != ConstantSummaries.end())
    return It->second.second.get();
  if (InProgress.contains(Definition->getCanonicalDecl()) ||
      Depth >= MaxSummaryDepth)
    return nullptr;
  State Entry = parametricEntry(*Definition);
  for (const auto &[L, Value] : Constants) {
    ValueFacts V = Entry.get(L);
    V.Scalar = ScalarFacts();
    V.Scalar.Known = Value;
    Entry.set(L, V);
  }
  Cuts Before = cuts();
  InProgress.insert(Definition->getCanonicalDecl());
  ++Depth;
  std::unique_ptr<FlowAnalysis> A = analyse(*Definition, std::move(Entry));
  --Depth;
  InProgress.erase(Definition->getCanonicalDecl());
  std::unique_ptr<FunctionSummary> Result;
  if (A && A->converged())
    Result = std::make_unique<FunctionSummary>(buildSummary(*Definition, *A));
  if (!keepable(Before)) {
    TransientAnalyses.push_back(std::move(A));
    if (!Result)
      return nullptr;
    TransientSummaries.push_back(std::move(Result));
    return TransientSummaries.back().get();
  }
  auto &Slot = ConstantSummaries[Key];
  Slot = {std::move(A), std::move(Result)};
  return Slot.second.get();
}

const FunctionSummary *
FlowModel::summaryForKnownInputs(const ResolvedCall &Call,
                                 const State &S) const {
  if (!Call.Callee)
    return nullptr;
  llvm::SmallVector<std::pair<Location, int64_t>, 2> Constants;
  for (const Location &In : Program.decidingInputs(*Call.Callee)) {
    std::optional<int64_t> Known;
    const auto *P = dyn_cast_or_null<ParmVarDecl>(In.Root);
    if (In.Kind == Location::Local && !In.Depth && P) {
      if (const Expr *Arg = argumentFor(Call, *P))
        Known = evaluateScalar(Arg, S).Known;
    } else if (In.Kind == Location::This &&
               isa<CXXConstructExpr>(Call.Call)) {
      continue; // the object is being built
    } else if (Location Here = callerLocation(In, Call)) {
      Known = S.get(Here).Scalar.Known;
    }
    if (Known)
      Constants.push_back({In, *Known});
  }
  if (Constants.empty())
    return nullptr;
  return Program.summaryWithConstants(*Call.Callee, Constants);
}

} // namespace clang::tidy::torch
