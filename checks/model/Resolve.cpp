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

/// The class a module holder (`Net` of TORCH_MODULE(Net)) or a
/// `std::shared_ptr<T>` holds.
static const CXXRecordDecl *heldClass(QualType T) {
  const CXXRecordDecl *RD = T.getNonReferenceType()->getAsCXXRecordDecl();
  for (unsigned Depth = 0; RD && Depth < 4; ++Depth) {
    if (const auto *Spec = dyn_cast<ClassTemplateSpecializationDecl>(RD)) {
      llvm::StringRef Name = Spec->getSpecializedTemplate()->getName();
      if ((Name == "ModuleHolder" || Name == "shared_ptr" ||
           Name == "unique_ptr") &&
          Spec->getTemplateArgs().size() >= 1 &&
          Spec->getTemplateArgs()[0].getKind() == TemplateArgument::Type)
        return Spec->getTemplateArgs()[0].getAsType()->getAsCXXRecordDecl();
    }
    if (!RD->hasDefinition() || RD->getNumBases() != 1)
      return nullptr;
    RD = RD->bases_begin()->getType()->getAsCXXRecordDecl();
  }
  return nullptr;
}

ResolvedCall FlowModel::resolve(const Expr &E) const {
  ResolvedCall R;
  R.Call = &E;
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(&E)) {
    const CXXConstructorDecl *Ctor = Construct->getConstructor();
    llvm::SmallVector<const Expr *, 4> Args(Construct->arguments());
    // A TORCH_MODULE holder built from arguments builds its module.
    if (isModuleHandleType(Construct->getType()) &&
        !Ctor->isCopyOrMoveConstructor() &&
        !(Args.size() == 1 && Args[0]->getType()->isNullPtrType()))
      if (const CXXRecordDecl *Held = heldClass(Construct->getType());
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
            constructorFor(heldClass(Call->getType()), Args)) {
      R.Callee = Ctor;
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
  return ME ? Method->getDevirtualizedMethod(ME->getBase(),
                                             /*IsAppleKext=*/false)
            : nullptr;
}

const Expr *callableHolder(const CallExpr &Call) {
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD)
    return Call.getCallee();
  const auto *Op = dyn_cast<CXXOperatorCallExpr>(&Call);
  const auto *Method = dyn_cast<CXXMethodDecl>(FD);
  if (Op && Op->getOperator() == OO_Call && Method &&
      !Method->getParent()->isLambda() && isLibraryFunction(*Method) &&
      Call.getNumArgs() > 0)
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

llvm::SmallVector<const FunctionDecl *, 1>
FlowModel::possibleCallableTargets(const CallExpr &Call, const State &S) const {
  llvm::SmallVector<const FunctionDecl *, 1> Out;
  if (const FunctionDecl *Target = callableTarget(Call, S)) {
    Out.push_back(Target);
    return Out;
  }
  // A range-for over a container of callables calls each element: each one
  // it may hold runs here. (An element picked by key may be another one.)
  const Expr *Holder = callableHolder(Call);
  if (!Holder || !rangeElementNamed(*Holder))
    return Out;
  unsigned Arguments = Call.getNumArgs() - (Call.getDirectCallee() ? 1 : 0);
  for (const FunctionDecl *F : evaluate(Holder, S).Callables)
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
    if (const FunctionDecl *Target = callableTarget(*Call, S)) {
      ResolvedCall R;
      R.Call = &E;
      R.Callee = Target;
      llvm::ArrayRef<const Expr *> Args(Call->getArgs(), Call->getNumArgs());
      if (Call->getDirectCallee())
        Args = Args.drop_front(); // the std::function itself
      R.Arguments.assign(Args.begin(), Args.end());
      return R;
    }
  return resolve(E);
}

const FunctionSummary *FlowModel::summaryAt(const Expr &E,
                                            const State &S) const {
  if (const auto *Call = dyn_cast<CallExpr>(&E))
    if (const FunctionDecl *Target = callableTarget(*Call, S))
      return Program.summary(*Target);
  return Program.summaryForCall(E);
}

} // namespace clang::tidy::torch
