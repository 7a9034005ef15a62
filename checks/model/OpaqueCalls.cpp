//===--- OpaqueCalls.cpp - torch-tidy -------------------------------------===//
//
// FlowModel at calls it cannot follow: a user function with no summary (no
// body in the TU, recursion, a virtual call of unknown overrides) or a
// callable of unknown contents. What such a call may change is forgotten:
// its arguments by non-const reference or pointer, module handles, the
// captures of a lambda argument, globals, the object of a non-const method,
// and, for unknown callables, any module's mode.
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

/// Every module's mode may have changed (PathFacts::ModesClobbered).
void FlowModel::forgetModes(State &St, QualType OfHandle) const {
  if (OfHandle.isNull())
    St.path().ModesClobbered = true;
  llvm::SmallVector<std::pair<Location, ValueFacts>, 4> Switched;
  St.forEach([&](const Location &L, const ValueFacts &V) {
    if (!OfHandle.isNull())
      if (QualType Held = locationType(L);
          !Held.isNull() && !mayNameSameModule(Held, OfHandle))
        return;
    if (V.Mode.isKnown() ||
        (V.Mode.Entry && isModuleHandleType(V.Mode.Entry->getType())))
      Switched.push_back({L, V});
  });
  llvm::sort(Switched, llvm::less_first());
  for (auto &[L, V] : Switched) {
    V.Mode = {};
    St.set(L, V);
  }
}

/// Whether \p Call may change what \p Arg denotes: it is passed by non-const
/// reference or by pointer, or it is a module handle (which names shared
/// state however it is passed) given to user code.
static bool mayChangeArgument(const FunctionDecl *FD, unsigned Index,
                              const Expr *Arg) {
  if (const auto *UO = dyn_cast<UnaryOperator>(Arg->IgnoreParenImpCasts());
      UO && UO->getOpcode() == UO_AddrOf)
    return true;
  if (FD && Index < FD->getNumParams()) {
    QualType PT = FD->getParamDecl(Index)->getType();
    // A forwarding reference of a library template (std::make_tuple,
    // std::move) passes its argument on; it does not change it.
    if (isLibraryFunction(*FD))
      if (const FunctionDecl *Pattern = FD->getTemplateInstantiationPattern();
          Pattern && Pattern->getNumParams() > 0) {
        // A pack (`Args&&... args`) covers the remaining arguments.
        unsigned P = std::min(Index, Pattern->getNumParams() - 1);
        QualType T = Pattern->getParamDecl(P)->getType();
        if (const auto *Pack = T->getAs<PackExpansionType>())
          T = Pack->getPattern();
        if (const auto *RV = T->getAs<RValueReferenceType>();
            RV && RV->getPointeeType()->isTemplateTypeParmType())
          return false;
      }
    if ((PT->isReferenceType() || PT->isPointerType()) &&
        !PT->getPointeeType().isConstQualified())
      return true;
  } else if (!FD || FD->isVariadic()) {
    return !Arg->getType().isConstQualified();
  }
  return isModuleHandleType(Arg->getType()) && !(FD && isLibraryFunction(*FD));
}

void FlowModel::forgetOpaqueEffects(const ResolvedCall &Call,
                                    State &St) const {
  const FunctionDecl *FD = Call.Callee;
  for (unsigned I = 0; I < Call.Arguments.size(); ++I) {
    const Expr *Arg = Call.Arguments[I];
    if (!Arg)
      continue;
    // A callable that captures by reference hands its captures on, even
    // through a const reference: calling it may change them.
    if (const CXXRecordDecl *Closure =
            stripConversions(Arg)->getType()->getAsCXXRecordDecl();
        Closure && Closure->isLambda())
      for (const LambdaCapture &C : Closure->captures()) {
        if (C.capturesThis()) {
          St.forgetRoots(Location::This);
          St.markClobbered(Location::thisObject());
        }
        else if (C.capturesVariable() && C.getCaptureKind() == LCK_ByRef)
          if (const auto *VD = dyn_cast<VarDecl>(C.getCapturedVar()))
            St.forgetTree(Location::local(VD));
      }
    // Even a const object's methods may change what its reference
    // members name.
    if (Location L = locationOf(stripConversions(Arg)))
      forgetBoundObjects(L, St);
    if (!mayChangeArgument(FD, I, Arg))
      continue;
    // std::get<0>(t), v.at(i): a library call whose result names a part of
    // its argument reads it; writes through the result are assignments.
    if (FD && isLibraryFunction(*FD) && Call.Call)
      if (Location Part = locationOf(Call.Call))
        if (Location Whole = locationOf(stripConversions(Arg));
            Whole && Part.hasPrefix(Whole))
          continue;
    const Expr *Target = Arg->IgnoreParenImpCasts();
    if (const auto *UO = dyn_cast<UnaryOperator>(Target);
        UO && UO->getOpcode() == UO_AddrOf)
      Target = UO->getSubExpr();
    if (Location L = locationOf(stripConversions(Target)))
      St.forgetTree(L);
    if (Arg->getType()->isPointerType())
      if (Location Pointee = pointeeLocation(Arg))
        St.forgetTree(Pointee);
  }
  if (FD && isLibraryFunction(*FD))
    return;
  // A user function whose body is not known may change any global, and a
  // non-const method of the user's may change every member of its object.
  St.forgetRoots(Location::Global);
  // A virtual call of uncertain target runs some override of the method it
  // names.
  const auto *MD = dyn_cast_or_null<CXXMethodDecl>(FD);
  if (const auto *Named = dyn_cast_or_null<CallExpr>(Call.Call); !MD && Named)
    MD = dyn_cast_or_null<CXXMethodDecl>(Named->getDirectCallee());
  if (!MD || MD->isStatic() || !Call.Object || isLibraryFunction(*MD))
    return;
  forgetBoundObjects(Call.Object, St);
  if (MD->isConst())
    return;
  St.forgetTree(Call.Object);
  if (Call.Object.Kind == Location::This)
    St.markClobbered(Call.Object);
  // A method of the class whose state is being computed, on `*this`: it
  // leaves the members within that state, as every method must.
  if (Call.Object == Location::thisObject())
    if (const auto *Invariant = Program.classInvariantSoFar(MD->getParent()))
      for (const auto &[Member, Facts] : *Invariant)
        if (!Facts.isUnknown())
          St.set(Member, Facts);
}

} // namespace clang::tidy::torch
