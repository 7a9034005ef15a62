//===--- Resolve.cpp - torch-tidy -----------------------------------------===//
//
// FlowModel at calls: which function a call runs and with which arguments.
// A direct call runs its callee (a virtual one only when its target is
// certain); std::make_shared<T> and a module holder run T's constructor; a
// call of a callable (a std::function, a function pointer) runs what the
// callable holds in the state at the call.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "ProgramModel.h"
#include "api/StdLibrary.h"
#include "api/TorchApi.h"
#include "api/TorchMatchers.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

/// The constructor of \p Class that \p Args select, when only one takes
/// that many arguments.
static const CXXConstructorDecl *
constructorFor(const CXXRecordDecl *Class, llvm::ArrayRef<const Expr *> Args) {
  if (!Class || !Class->hasDefinition())
    return nullptr;
  const CXXConstructorDecl *Found = nullptr;
  for (const CXXConstructorDecl *Ctor : Class->getDefinition()->ctors()) {
    if (Ctor->isCopyOrMoveConstructor() || Ctor->isDeleted())
      continue;
    if (Args.size() > Ctor->getNumParams() ||
        Args.size() < Ctor->getMinRequiredArguments())
      continue;
    if (Found)
      return nullptr; // overloaded: not known which
    Found = Ctor;
  }
  return Found;
}

const CXXConstructorDecl *constructorThatRuns(const CXXConstructorDecl *Ctor) {
  if (Ctor && Ctor->isInheritingConstructor())
    if (const CXXConstructorDecl *Base =
            Ctor->getInheritedConstructor().getConstructor())
      return Base;
  return Ctor;
}

ResolvedCall FlowModel::resolve(const Expr &E) const {
  ResolvedCall R;
  R.Call = &E;
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(&E)) {
    const CXXConstructorDecl *Ctor =
        constructorThatRuns(Construct->getConstructor());
    llvm::SmallVector<const Expr *, 4> Args(Construct->arguments());
    // A TORCH_MODULE holder built from arguments builds its module.
    if (isModuleHandleType(Construct->getType()) &&
        !Ctor->isCopyOrMoveConstructor() &&
        !(Args.size() == 1 && Args[0]->getType()->isNullPtrType()))
      if (const CXXRecordDecl *Held = moduleClassOfHandle(Construct->getType());
          Held && Held != Ctor->getParent())
        if (const CXXConstructorDecl *Inner = constructorFor(Held, Args))
          Ctor = Inner;
    R.Callee = Ctor;
    R.Arguments.assign(Args.begin(), Args.end());
    return R;
  }
  const auto *Call = dyn_cast<CallExpr>(&E);
  if (!Call)
    return R;
  const FunctionDecl *FD = Call->getDirectCallee();
  llvm::ArrayRef<const Expr *> Args(Call->getArgs(), Call->getNumArgs());
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Call);
      Op && FD && isa<CXXMethodDecl>(FD) && Call->getNumArgs() > 0) {
    R.ObjectExpr = Call->getArg(0);
    Args = Args.drop_front();
  } else if (const auto *Member = dyn_cast<CXXMemberCallExpr>(Call)) {
    R.ObjectExpr = Member->getImplicitObjectArgument();
  }
  if (R.ObjectExpr) {
    const Expr *Object = R.ObjectExpr->IgnoreParenImpCasts();
    R.Object = isa<CXXThisExpr>(Object) ? Location::thisObject()
                                        : locationOf(Object);
  }
  // std::make_shared<T>(args), std::make_unique<T>(args): T's constructor.
  if (isOwnerFactory(FD))
    if (const CXXConstructorDecl *Ctor =
            // (The owner's class, module or not.)
            constructorFor(moduleClassOfHandle(Call->getType()), Args)) {
      R.Callee = Ctor;
      R.Arguments.assign(Args.begin(), Args.end());
      return R;
    }
  // `o.emplace(args)`: the held class's constructor, on the object `o` holds.
  if (const CXXRecordDecl *Held = optionalEmplacedClass(*Call))
    if (const CXXConstructorDecl *Ctor = constructorFor(Held, Args)) {
      R.Callee = Ctor;
      if (R.Object)
        R.Object = R.Object.child(Selector::element());
      R.Arguments.assign(Args.begin(), Args.end());
      return R;
    }
  R.Callee = Program.calleeOf(*Call);
  R.Arguments.assign(Args.begin(), Args.end());
  return R;
}

const FunctionDecl *certainCallee(const CallExpr &Call) {
  const FunctionDecl *FD = Call.getDirectCallee();
  const auto *Method = dyn_cast_or_null<CXXMethodDecl>(FD);
  if (!Method || !Method->isVirtual())
    return FD;
  // A virtual call is known only when its target is certain.
  const auto *Member = dyn_cast<CXXMemberCallExpr>(&Call);
  const auto *ME =
      Member ? dyn_cast<MemberExpr>(Member->getCallee()->IgnoreParens())
             : nullptr;
  if (ME && ME->hasQualifier())
    return Method;
  if (ME)
    return Method->getDevirtualizedMethod(ME->getBase(), /*IsAppleKext=*/false);
  // `(*objective_)(logits, y)`: a virtual operator on its first operand.
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&Call);
      Op && Op->getNumArgs() > 0)
    return Method->getDevirtualizedMethod(Op->getArg(0), /*IsAppleKext=*/false);
  return nullptr;
}

/// `obj.*pm` or `ptr->*pm`, the callee of a call through a pointer to a
/// member function; null otherwise.
static const BinaryOperator *memberPointerCallee(const CallExpr &Call) {
  const auto *Op =
      dyn_cast_or_null<BinaryOperator>(Call.getCallee()->IgnoreParenImpCasts());
  return Op && Op->isPtrMemOp() ? Op : nullptr;
}

const Expr *callableHolder(const CallExpr &Call) {
  const FunctionDecl *FD = Call.getDirectCallee();
  if (const BinaryOperator *PtrMem = memberPointerCallee(Call))
    return PtrMem->getRHS();
  if (!FD)
    return Call.getCallee();
  const auto *Op = dyn_cast<CXXOperatorCallExpr>(&Call);
  const auto *Method = dyn_cast<CXXMethodDecl>(FD);
  // A module holder's `operator()` is a module call, not a callable's.
  if (Op && Op->getOperator() == OO_Call && Method &&
      !Method->getParent()->isLambda() && isLibraryFunction(*Method) &&
      Call.getNumArgs() > 0 && isCallableType(Call.getArg(0)->getType()))
    return Call.getArg(0);
  return nullptr;
}

const VarDecl *rangeElementNamed(const Expr &E) {
  const Expr *Current = &E;
  while (true) {
    Current = Current->IgnoreParenImpCasts();
    if (const auto *Member = dyn_cast<MemberExpr>(Current)) {
      Current = Member->getBase();
      continue;
    }
    const auto *Ref = dyn_cast<DeclRefExpr>(Current);
    if (!Ref)
      return nullptr;
    const ValueDecl *D = Ref->getDecl();
    if (const auto *Binding = dyn_cast<BindingDecl>(D))
      D = Binding->getDecomposedDecl();
    const auto *Var = dyn_cast_or_null<VarDecl>(D);
    return Var && Var->isCXXForRangeDecl() ? Var : nullptr;
  }
}

/// The first variable \p E names, looking inside it.
static const VarDecl *firstVariableIn(const Stmt *E) {
  if (!E)
    return nullptr;
  if (const auto *Ref = dyn_cast<DeclRefExpr>(E))
    if (const auto *Var = dyn_cast<VarDecl>(Ref->getDecl()))
      return Var;
  for (const Stmt *Child : E->children())
    if (const VarDecl *V = firstVariableIn(Child))
      return V;
  return nullptr;
}

const Expr *rangeOfElement(const VarDecl &Element) {
  // `auto &e : c` is `auto &e = *__begin`, `__begin = __range.begin()`,
  // `auto &&__range = c`.
  const VarDecl *Begin = firstVariableIn(Element.getInit());
  const VarDecl *Range = Begin ? firstVariableIn(Begin->getInit()) : nullptr;
  return Range && Range != &Element && Range != Begin && Range->getInit()
             ? Range->getInit()->IgnoreParenImpCasts()
             : nullptr;
}

llvm::SmallVector<const FunctionDecl *, 1>
FlowModel::possibleCallableTargets(const CallExpr &Call, const State &S) const {
  llvm::SmallVector<const FunctionDecl *, 1> Out;
  if (const FunctionDecl *Target = callableTarget(Call, S)) {
    Out.push_back(Target);
    return Out;
  }
  // A range-for over a container of callables calls each element: each one
  // it may hold runs here. (An element picked by key may be another one.)
  // A callable variable or member runs the one it holds on this path: one
  // of those every path gave it.
  const Expr *Holder = callableHolder(Call);
  if (!Holder)
    return Out;
  ValueFacts Held = evaluate(Holder, S);
  if (!rangeElementNamed(*Holder)) {
    Location L = locationOf(Holder->IgnoreParenImpCasts());
    if (!Held.CallablesKnown || !L || L.isElement())
      return Out;
  }
  unsigned Arguments = Call.getNumArgs() - (Call.getDirectCallee() ? 1 : 0);
  for (const FunctionDecl *F : Held.Callables)
    if (F->getNumParams() == Arguments)
      Out.push_back(F);
  return Out;
}

const FunctionDecl *FlowModel::callableTarget(const CallExpr &Call,
                                              const State &S) const {
  const Expr *Holder = callableHolder(Call);
  if (!Holder)
    return nullptr;
  const FunctionDecl *F = evaluate(Holder, S).callable();
  unsigned Arguments = Call.getNumArgs() - (Call.getDirectCallee() ? 1 : 0);
  return F && F->getNumParams() == Arguments ? F : nullptr;
}

ResolvedCall FlowModel::resolve(const Expr &E, const State &S) const {
  if (const auto *Call = dyn_cast<CallExpr>(&E))
    if (const FunctionDecl *Target = callableTarget(*Call, S))
      return resolveAs(*Call, *Target, S);
  return resolve(E);
}

ResolvedCall FlowModel::resolveAs(const CallExpr &Call, const FunctionDecl &Target,
                                  const State &S) const {
      ResolvedCall R;
      R.Call = &Call;
      R.Callee = &Target;
      llvm::ArrayRef<const Expr *> Args(Call.getArgs(), Call.getNumArgs());
      if (Call.getDirectCallee())
        Args = Args.drop_front(); // the std::function itself
      R.Arguments.assign(Args.begin(), Args.end());
      const auto *Method = dyn_cast<CXXMethodDecl>(&Target);
      if (!Method || Method->isStatic())
        return R;
      // A lambda that captured `this`, run by a method of the same class
      // (`on_batch_(loss)` holding `[this](...) {...}`): the members it
      // reaches are this function's object's.
      if (Method->getParent()->isLambda()) {
        const CXXMethodDecl *Enclosing = enclosingMethodOfLambda(*Method);
        const auto *Caller =
            dyn_cast_or_null<CXXMethodDecl>(dyn_cast_or_null<FunctionDecl>(Owner));
        if (Enclosing && Caller && !Caller->isStatic() &&
            !Caller->getParent()->isLambda() &&
            (Caller->getParent() == Enclosing->getParent() ||
             Caller->getParent()->isDerivedFrom(Enclosing->getParent())) &&
            llvm::any_of(Method->getParent()->captures(),
                         [](const LambdaCapture &C) { return C.capturesThis(); }))
          R.Object = Location::thisObject();
        return R;
      }
      // The object a member function runs on: the left of `->*`, or `this`
      // where the callable bound it and this function's object is one.
      if (const BinaryOperator *PtrMem = memberPointerCallee(Call)) {
        R.ObjectExpr = PtrMem->getLHS();
        const Expr *Object = R.ObjectExpr->IgnoreParenImpCasts();
        R.Object = isa<CXXThisExpr>(Object) ? Location::thisObject()
                                            : locationOf(Object);
      } else if (const auto *Caller = dyn_cast_or_null<CXXMethodDecl>(
                     dyn_cast_or_null<FunctionDecl>(Owner));
                 Caller && !Caller->isStatic() &&
                 !Caller->getParent()->isLambda() &&
                 (Caller->getParent() == Method->getParent() ||
                  Caller->getParent()->isDerivedFrom(Method->getParent())) &&
                 evaluate(callableHolder(Call), S).CallablesOnThis) {
        R.Object = Location::thisObject();
      }
      return R;
}

bool FlowModel::callTrains(const CallExpr &Call, TrainingCall What,
                           const State &S) const {
  if (callableHolder(Call))
    if (auto Targets = possibleCallableTargets(Call, S); !Targets.empty())
      return llvm::all_of(Targets, [&](const FunctionDecl *F) {
        return Program.functionTrains(*F, What);
      });
  return Program.callTrains(Call, What);
}

bool FlowModel::mayTrain(const CallExpr &Call, const State &S) const {
  if (callableHolder(Call))
    if (auto Targets = possibleCallableTargets(Call, S); !Targets.empty())
      return llvm::any_of(Targets, [&](const FunctionDecl *F) {
        return Program.functionMayTrain(*F);
      });
  return Program.mayTrain(Call);
}

const FunctionSummary *FlowModel::summaryAt(const Expr &E,
                                            const State &S) const {
  if (const auto *Call = dyn_cast<CallExpr>(&E))
    if (const FunctionDecl *Target = callableTarget(*Call, S))
      return Program.summary(*Target);
  const FunctionSummary *Plain = Program.summaryForCall(E);
  if (!Plain)
    return nullptr;
  // A constant passed for an input the callee branches on picks the branch
  // (`set_mode(*net, Phase::Evaluate)`).
  const FunctionSummary *Specialised = summaryForKnownInputs(resolve(E, S), S);
  return Specialised ? Specialised : Plain;
}

} // namespace clang::tidy::torch
