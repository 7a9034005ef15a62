//===--- SharedOwnerScan.h - torch-tidy -----------------------*- C++ -*-===//
//
// The owning pointers of a body that another name may reach (BodyScan.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_SHAREDOWNERSCAN_H
#define TORCH_TIDY_MODEL_SHAREDOWNERSCAN_H

#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace clang::tidy::torch {

/// Finds the owning pointers (std::unique_ptr, std::shared_ptr variables)
/// that are used other than through `*`, `->` and assignment, lambda
/// bodies included: a copy, `get()`, a capture by copy. Another name may
/// reach their object, so they are not tracked.
class SharedOwnerScan : public RecursiveASTVisitor<SharedOwnerScan> {
public:
  bool shouldVisitLambdaBody() const { return true; }

  bool VisitCXXOperatorCallExpr(CXXOperatorCallExpr *Op) {
    OverloadedOperatorKind K = Op->getOperator();
    // `p == nullptr` tests the pointer; no other name reaches the object.
    bool NullTest = (K == OO_EqualEqual || K == OO_ExclaimEqual) &&
                    Op->getNumArgs() == 2 &&
                    Op->getArg(1)->IgnoreParenImpCasts()->getType()->isNullPtrType();
    if ((K == OO_Star || K == OO_Arrow || K == OO_Equal || NullTest) &&
        Op->getNumArgs() >= 1)
      if (const auto *Ref = dyn_cast<DeclRefExpr>(
              Op->getArg(0)->IgnoreParenImpCasts());
          Ref && isOwningPointer(Ref->getType()))
        ++Derefs[Ref->getDecl()];
    return true;
  }

  /// `if (!p)`: a test of the pointer, no other name of the object.
  bool VisitCXXMemberCallExpr(CXXMemberCallExpr *Call) {
    if (isa_and_nonnull<CXXConversionDecl>(Call->getMethodDecl()) &&
        Call->getType()->isBooleanType())
      if (const auto *Ref = dyn_cast<DeclRefExpr>(
              Call->getImplicitObjectArgument()->IgnoreParenImpCasts());
          Ref && isOwningPointer(Ref->getType()))
        ++Derefs[Ref->getDecl()];
    return true;
  }

  bool VisitDeclRefExpr(DeclRefExpr *Ref) {
    if (isOwningPointer(Ref->getType()))
      ++Uses[Ref->getDecl()];
    return true;
  }

  /// A module handed to one of the program's own functions
  /// (`evaluate(net)` with `const std::shared_ptr<NetImpl> &`) or
  /// constructors (`Trainer t(net)`) is seen through its summary, as a
  /// module holder is, or forgotten at an opaque call; `torch::load(net,
  /// path, device)` and `torch::save(net, path)` are modelled.
  bool VisitCallExpr(CallExpr *Call) {
    const FunctionDecl *Callee = Call->getDirectCallee();
    const Expr *LoadDevice = nullptr;
    if (Callee && (moduleLoadedBy(*Call, LoadDevice) ||
                   Callee->getQualifiedNameAsString() == "torch::save")) {
      handedOn({Call->getArg(0)});
      return true;
    }
    if (!Callee || isLibraryFunction(*Callee))
      return true;
    handedOn({Call->getArgs(), Call->getNumArgs()});
    return true;
  }

  bool VisitCXXConstructExpr(CXXConstructExpr *Construct) {
    const CXXConstructorDecl *Ctor = Construct->getConstructor();
    if (Ctor && !Ctor->isCopyOrMoveConstructor() && !isLibraryFunction(*Ctor))
      handedOn({Construct->getArgs(), Construct->getNumArgs()});
    return true;
  }

  void handedOn(llvm::ArrayRef<const Expr *> Args) {
    for (const Expr *Arg : Args) {
      Arg = Arg->IgnoreImplicit();
      // A copy for a by-value parameter.
      if (const auto *Copy = dyn_cast<CXXConstructExpr>(Arg);
          Copy && Copy->getNumArgs() == 1 &&
          Copy->getConstructor()->isCopyOrMoveConstructor())
        Arg = Copy->getArg(0)->IgnoreImplicit();
      if (const auto *Ref = dyn_cast<DeclRefExpr>(Arg);
          Ref && isOwningPointer(Ref->getType()) &&
          isModuleHandleType(Ref->getType()))
        ++Derefs[Ref->getDecl()];
    }
  }

  /// `return p;` hands the object on; the local dies.
  bool VisitReturnStmt(ReturnStmt *Return) {
    const Expr *Value =
        Return->getRetValue() ? Return->getRetValue()->IgnoreImplicit() : nullptr;
    if (const auto *Move = dyn_cast_or_null<CXXConstructExpr>(Value);
        Move && Move->getNumArgs() == 1)
      Value = Move->getArg(0)->IgnoreImplicit();
    if (const auto *Ref = dyn_cast_or_null<DeclRefExpr>(Value);
        Ref && isOwningPointer(Ref->getType()))
      ++Derefs[Ref->getDecl()];
    return true;
  }

  bool VisitLambdaExpr(LambdaExpr *Lambda) {
    for (const LambdaCapture &C : Lambda->captures())
      if (C.capturesVariable() && C.getCaptureKind() == LCK_ByCopy)
        if (const ValueDecl *V = C.getCapturedVar();
            V && isOwningPointer(V->getType()))
          ++Uses[V];
    return true;
  }

  void addShared(llvm::DenseSet<const ValueDecl *> &Out) const {
    for (const auto &[V, N] : Uses)
      if (N != Derefs.lookup(V))
        Out.insert(V);
  }

private:
  llvm::DenseMap<const ValueDecl *, unsigned> Uses, Derefs;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_SHAREDOWNERSCAN_H
