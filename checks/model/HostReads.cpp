//===--- HostReads.cpp - torch-tidy ---------------------------------------===//
//
// FlowModel::hostReadOperands: the tensors a statement reads on the host
// (`.item()`, `data_ptr()`, streaming, computations on host tensors, a user
// function given the tensor), where a pending device-to-host copy must have
// completed.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "Summary.h"
#include "api/StdLibrary.h"
#include "api/TorchApi.h"
#include "api/TorchMatchers.h"
#include "clang/AST/ExprCXX.h"
#include "llvm/ADT/StringSwitch.h"

namespace clang::tidy::torch {

static const Expr *hostReadOperandOf(const Stmt &S);

/// `h + 1`, `h * w`, `-h`, `h += 1`: not `h = ...`, `h[i]` (a view).
static bool computesOnOperands(const CXXOperatorCallExpr &Op) {
  switch (Op.getOperator()) {
  case OO_Equal:
  case OO_Subscript:
  case OO_Call:
  case OO_Arrow:
    return false;
  case OO_Star: // `*it` dereferences; `h * w` computes.
    return Op.getNumArgs() == 2;
  default:
    return true;
  }
}

/// Tensor methods that read no element: metadata, and copies that stay
/// ordered on the stream.
static bool readsNoData(llvm::StringRef Method) {
  return llvm::StringSwitch<bool>(Method)
      .Cases("size", "sizes", "dim", "numel", "dtype", "scalar_type", true)
      .Cases("device", "options", "is_cuda", "is_pinned", "defined", true)
      .Cases("to", "cuda", "cpu", "copy_", "pin_memory", "is_contiguous", true)
      .Cases("stride", "strides", "ndimension", "requires_grad", true)
      .Default(isViewMethod(Method)); // a view reads nothing until read
}

/// The tensor whose memory \p E views (`h[i]`, `h.select(0, i)`,
/// `h.narrow(...)[j]`): reading the view reads it. \p E itself otherwise.
static const Expr *viewedStorage(const Expr *E) {
  for (unsigned Depth = 0; E && Depth < 8; ++Depth) {
    E = stripConversions(E);
    if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E);
        Op && Op->getOperator() == OO_Subscript && Op->getNumArgs() == 2 &&
        isTensorType(Op->getArg(0)->getType())) {
      E = Op->getArg(0);
      continue;
    }
    const auto *Call = dyn_cast<CallExpr>(E);
    if (Call && isViewMethod(tensorMethodName(*Call)))
      if (const Expr *Object = memberCallObject(*Call)) {
        E = Object;
        continue;
      }
    break;
  }
  return E;
}

void FlowModel::hostReadOperands(const Stmt &S,
                                 llvm::SmallVectorImpl<const Expr *> &Out) {
  size_t Before = Out.size();
  collectHostReadOperands(S, Out);
  for (size_t I = Before; I < Out.size(); ++I)
    if (const Expr *Viewed = viewedStorage(Out[I]);
        isa<DeclRefExpr, MemberExpr>(Viewed))
      Out[I] = Viewed;
}

void FlowModel::collectHostReadOperands(const Stmt &S,
                                        llvm::SmallVectorImpl<const Expr *> &Out) {
  if (const Expr *Operand = hostReadOperandOf(S)) {
    Out.push_back(Operand);
    return;
  }
  const auto *Call = dyn_cast<CallExpr>(&S);
  if (!Call)
    return;
  // A computation on the host reads its operands' data: `h.sum()`,
  // `h + 1`, `torch::argmax(h)`. Metadata and copies onward do not.
  if (llvm::StringRef Method = tensorMethodName(*Call); !Method.empty()) {
    if (!readsNoData(Method))
      if (const Expr *Object = memberCallObject(*Call))
        Out.push_back(stripConversions(Object));
    return;
  }
  if (const FunctionDecl *FD = Call->getDirectCallee();
      FD && isTensorType(Call->getType()) && isLibraryFunction(*FD) &&
      (isa<CXXOperatorCallExpr>(Call) ? computesOnOperands(
                                            cast<CXXOperatorCallExpr>(*Call))
                                      : isTorchFunction(*FD))) {
    for (const Expr *Arg : Call->arguments())
      if (isTensorType(Arg->getType()))
        Out.push_back(stripConversions(Arg));
    return;
  }
  ModuleCall MC;
  if (matchModuleCall(*Call, MC))
    return;
  unsigned First = 0;
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Call)) {
    // Of the operators, only the call of a lambda or functor passes
    // arguments; streaming and comparisons are hostReadOperandOf's.
    if (Op->getOperator() != OO_Call)
      return;
    First = 1;
  }
  // A std::function runs the program's code (`on_window_(id, probs)`).
  bool ThroughCallable = callableHolder(*Call);
  if (const FunctionDecl *FD = Call->getDirectCallee())
    if (isLibraryFunction(*FD) && !ThroughCallable)
      return;
  for (unsigned I = First; I < Call->getNumArgs(); ++I) {
    const Expr *Arg = stripConversions(Call->getArg(I));
    // A variable, a member, or a getter's reference to one (`host()`).
    if (isTensorType(Arg->getType()) &&
        (isa<DeclRefExpr, MemberExpr>(viewedStorage(Arg)) ||
         (isa<CallExpr>(Arg) && Arg->isGLValue())))
      Out.push_back(Arg);
  }
}

static const Expr *hostReadOperandOf(const Stmt &S) {
  if (const auto *Call = dyn_cast<CallExpr>(&S)) {
    llvm::StringRef Method = tensorMethodName(*Call);
    if (Method == "item" || Method == "data_ptr" || Method == "accessor" ||
        Method == "tolist" || Method == "const_data_ptr" ||
        Method == "mutable_data_ptr")
      return memberCallObject(*Call);
  }
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&S)) {
    if (Op->getNumArgs() == 2 &&
        (Op->getOperator() == OO_LessLess || Op->isComparisonOp()))
      for (unsigned I = Op->getOperator() == OO_LessLess ? 1 : 0; I < 2; ++I)
        if (isTensorType(Op->getArg(I)->getType()))
          return Op->getArg(I)->IgnoreParenImpCasts();
  }
  return nullptr;
}

void FlowModel::hostReadsAt(const Stmt &S, const State &St,
                            llvm::SmallVectorImpl<const Expr *> &Out) const {
  size_t Before = Out.size();
  hostReadOperands(S, Out);
  const auto *Call = dyn_cast<CallExpr>(&S);
  const FunctionSummary *Summary = Call ? summaryAt(*Call, St) : nullptr;
  if (!Summary || !Summary->MaySynchronize)
    return;
  auto Handed = [&](const Expr *Read) {
    return llvm::any_of(Call->arguments(), [&](const Expr *Arg) {
      return stripConversions(Arg) == Read;
    });
  };
  Out.erase(std::remove_if(Out.begin() + Before, Out.end(), Handed), Out.end());
}

bool FlowModel::matchHostSync(const CallExpr &Call, const State &St,
                              HostSync &Out) const {
  llvm::StringRef Method = tensorMethodName(Call);
  Out = HostSync();
  if (Method == "item" || Method == "cpu") {
    Out.Tensor = memberCallObject(Call);
    return true;
  }
  if (Method == "to") {
    // Only a blocking copy to a known CPU destination.
    const Expr *NonBlocking = argumentForParameter(Call, "non_blocking");
    if (NonBlocking && evaluateBool(NonBlocking, St) != false)
      return false;
    bool ToCPU = false;
    for (llvm::StringRef P : {"options", "device"})
      if (const Expr *Dest = argumentForParameter(Call, P))
        ToCPU = ToCPU || evaluateDeviceSpec(Dest, St).Value.isCPU();
    if (const Expr *Other = argumentForParameter(Call, "other"))
      ToCPU = evaluate(Other, St).Device.Value.isCPU();
    Out.Tensor = memberCallObject(Call);
    return ToCPU;
  }
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(&Call)) {
    if (Op->getOperator() != OO_LessLess || Op->getNumArgs() != 2 ||
        !isTensorType(Op->getArg(1)->getType()) || !isOstreamInsertion(*Op))
      return false;
    Out.Tensor = Op->getArg(1);
    Out.How = HostSync::Print;
    return true;
  }
  if (isSynchronizeCall(Call, options())) {
    Out.How = HostSync::Synchronize;
    return true;
  }
  return false;
}

} // namespace clang::tidy::torch
