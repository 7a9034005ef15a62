//===--- DeviceOperations.cpp - torch-tidy --------------------------------===//
//
// The operations whose tensors must share a device (a module call, a
// tensor operator, a multi-tensor function), their operands, and the tensor
// copies that may be non-blocking.
//
//===----------------------------------------------------------------------===//

#include "api/StdLibrary.h"
#include "api/TorchApi.h"
#include "api/TorchMatchers.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"
#include "llvm/ADT/StringSet.h"

namespace clang::tidy::torch {

/// A tensor parameter that the function reads on the host or moves itself
/// (ctc_loss's lengths are read as integer lists, its targets moved to the
/// log-probabilities' device): not an operand that must share the device.
static bool isHostSideParameter(const FunctionDecl &FD, const ParmVarDecl &P) {
  if (!P.getIdentifier())
    return false;
  llvm::StringRef N = P.getName();
  if (N.ends_with("lengths"))
    return true;
  return FD.getIdentifier() && FD.getName() == "ctc_loss" && N == "targets";
}

static bool isElementwiseFunction(const FunctionDecl &FD) {
  return FD.getIdentifier() && isElementwiseOfTwo(FD.getName());
}

/// Tensor methods that compute with their object and a tensor argument,
/// which must be on its device. Not those that read only the other's shape
/// or dtype (`expand_as`, `type_as`), nor copies across devices (`copy_`,
/// `to`).
static bool isCombiningTensorMethod(llvm::StringRef N, bool &Elementwise) {
  static const llvm::StringSet<> Other = {
      "matmul",  "mm",           "bmm",           "mv",         "dot",
      "addmm",   "gather",       "index_select",  "scatter",    "scatter_add",
      "cross",   "dist",         "allclose",      "equal",      "take",
      "index_add", "index_copy", "masked_select", "masked_scatter"};
  llvm::StringRef Base = N.ends_with("_") ? N.drop_back() : N;
  Elementwise = isElementwiseOfTwo(Base);
  return Elementwise || Other.contains(Base);
}

/// The operands one argument gives: a tensor, the elements of a braced
/// list (`{a, b}`, `{IValue(x)}`), or a container variable, which stands for
/// its elements.
static void appendOperands(const Expr *Arg,
                           llvm::SmallVectorImpl<const Expr *> &Out) {
  if (!Arg || isa<CXXDefaultArgExpr>(Arg))
    return;
  const Expr *Stripped = stripConversions(Arg);
  if (const auto *Std = dyn_cast<CXXStdInitializerListExpr>(Stripped))
    Stripped = stripConversions(Std->getSubExpr());
  if (const auto *List = dyn_cast<InitListExpr>(Stripped)) {
    for (const Expr *Init : List->inits())
      Out.push_back(stripConversions(Init));
  } else if (const Expr *Tensor = tensorArgument(Arg)) {
    Out.push_back(Tensor);
  } else if (operandContainerRecord(Stripped->getType())) {
    Out.push_back(Stripped);
  } else if (const CXXRecordDecl *RD = Stripped->getType()->getAsCXXRecordDecl();
             RD && RD->getIdentifier() && RD->getName().ends_with("Options") &&
             isTorchNamespaceDecl(*RD)) {
    // `CrossEntropyFuncOptions().weight(w)`: the tensors the options hold.
    for (const Expr *E = Stripped; E;) {
      const auto *Set = dyn_cast<CXXMemberCallExpr>(E->IgnoreImplicit());
      if (!Set)
        break;
      for (const Expr *Value : Set->arguments())
        if (const Expr *Tensor = tensorArgument(Value))
          Out.push_back(Tensor);
      E = stripConversions(Set->getImplicitObjectArgument());
    }
  }
}

bool matchDeviceOperation(const Stmt &S, DeviceOperation &Out) {
  const auto *E = dyn_cast<Expr>(&S);
  if (!E)
    return false;
  ModuleCall MC;
  if (matchModuleCall(*E, MC) && !MC.TypeErased) {
    Out = {};
    Out.IsModuleCall = true;
    Out.Operands.push_back(MC.Module);
    for (const Expr *In : MC.Inputs)
      appendOperands(In, Out.Operands);
    return true;
  }
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E)) {
    OverloadedOperatorKind K = Op->getOperator();
    bool Arithmetic = K == OO_Plus || K == OO_Minus || K == OO_Star ||
                      K == OO_Slash || K == OO_PlusEqual ||
                      K == OO_MinusEqual || K == OO_StarEqual ||
                      K == OO_SlashEqual;
    // `pred == labels`: a comparison computes element-wise too.
    bool Comparison = K == OO_EqualEqual || K == OO_ExclaimEqual ||
                      K == OO_Less || K == OO_Greater || K == OO_LessEqual ||
                      K == OO_GreaterEqual;
    if (!(Arithmetic || Comparison) || Op->getNumArgs() != 2)
      return false;
    Out = {};
    Out.What = std::string("operator '") + getOperatorSpelling(K) + "'";
    Out.Operands = {Op->getArg(0), Op->getArg(1)};
    Out.Elementwise = true;
    Out.InPlace = K == OO_PlusEqual || K == OO_MinusEqual ||
                  K == OO_StarEqual || K == OO_SlashEqual;
    return true;
  }
  const auto *Call = dyn_cast<CallExpr>(E);
  const FunctionDecl *FD = Call ? Call->getDirectCallee() : nullptr;
  // `pred.eq(labels)`, `a.matmul(b)`: the object and its tensor arguments.
  if (const auto *Member = dyn_cast_or_null<CXXMemberCallExpr>(Call)) {
    llvm::StringRef Method = tensorMethodName(*Member);
    bool Elementwise = false;
    if (Method.empty() || !isCombiningTensorMethod(Method, Elementwise))
      return false;
    llvm::SmallVector<const Expr *, 4> Operands{memberCallObject(*Member)};
    for (const Expr *Arg : Member->arguments())
      if (const Expr *Tensor = tensorArgument(Arg))
        Operands.push_back(Tensor);
    if (Operands.size() < 2 || !Operands.front())
      return false;
    Out = {};
    Out.What = "'" + Method.str() + "()'";
    Out.Operands = std::move(Operands);
    Out.Elementwise = Elementwise;
    Out.InPlace = Method.ends_with("_");
    return true;
  }
  if (!FD || !isMultiTensorFunction(*FD))
    return false;
  Out = {};
  Out.What = "'" + FD->getQualifiedNameAsString() + "'";
  Out.Elementwise = isElementwiseFunction(*FD);
  functionOperands(*Call, Out.Operands);
  return true;
}

void functionOperands(const CallExpr &Call,
                      llvm::SmallVectorImpl<const Expr *> &Out) {
  const FunctionDecl *FD = Call.getDirectCallee();
  for (unsigned I = 0; I < Call.getNumArgs(); ++I) {
    const Expr *Arg = Call.getArg(I);
    if (FD && I < FD->getNumParams() &&
        isHostSideParameter(*FD, *FD->getParamDecl(I)))
      continue;
    appendOperands(Arg, Out);
  }
}

const Expr *tensorArgument(const Expr *Arg) {
  if (!Arg || isa<CXXDefaultArgExpr>(Arg))
    return nullptr;
  if (isTensorType(Arg->getType()))
    return Arg;
  const Expr *E = Arg->IgnoreImplicit();
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(E);
      Construct && Construct->getNumArgs() == 1 &&
      Construct->getConstructor()->getParent()->getName() == "optional")
    E = Construct->getArg(0)->IgnoreImplicit();
  return E != Arg->IgnoreImplicit() && isTensorType(E->getType()) ? E : nullptr;
}

bool matchTensorCopy(const Stmt &S, TensorCopy &Out) {
  const auto *Call = dyn_cast<CallExpr>(&S);
  if (!Call)
    return false;
  llvm::StringRef Method = tensorMethodName(*Call);
  if (Method == "to" || Method == "cuda") {
    Out = {Call, memberCallObject(*Call), Call};
    return true;
  }
  if (Method == "copy_" && Call->getNumArgs() >= 1) {
    Out = {Call, Call->getArg(0), memberCallObject(*Call)};
    return true;
  }
  return false;
}

} // namespace clang::tidy::torch
