//===--- TensorEvaluator.cpp - torch-tidy ---------------------------------===//
//
// TensorModel::evaluate: the facts of the value an expression computes.
//
//===----------------------------------------------------------------------===//

#include "ProgramModel.h"
#include "TensorModel.h"
#include "api/TorchMatchers.h"
#include "model/UserCodeParents.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/StmtCXX.h"
#include "llvm/ADT/StringSwitch.h"

namespace clang::tidy::torch {

/// "cuda", "cuda:3", "cpu" and friends, as c10::Device parses them.
static DeviceValue parseDeviceString(llvm::StringRef S) {
  auto [Type, Index] = S.split(':');
  int Ordinal = -1;
  if (!Index.empty() && Index.getAsInteger(10, Ordinal))
    return DeviceValue::unknown();
  if (Type == "cuda")
    return DeviceValue::cuda(Ordinal);
  if (Type == "cpu")
    return DeviceValue::cpu();
  if (Type == "mps" || Type == "meta" || Type == "xpu" || Type == "hip")
    return DeviceValue::other();
  return DeviceValue::unknown();
}

static DeviceValue deviceFromEnumName(llvm::StringRef Name) {
  return llvm::StringSwitch<DeviceValue>(Name)
      .Cases("kCUDA", "CUDA", DeviceValue::cuda())
      .Cases("kCPU", "CPU", DeviceValue::cpu())
      .Default(DeviceValue::other());
}

/// Tensor methods that return their receiver's storage or a same-shaped
/// copy: the result keeps the receiver's dimensionality.
static bool keepsShape(llvm::StringRef Method) {
  return llvm::StringSwitch<bool>(Method)
      .Cases("to", "cuda", "cpu", "pin_memory", "contiguous", "clone", true)
      .Cases("detach", "detach_", "requires_grad_", "relu", "sigmoid", true)
      .Cases("tanh", "exp", "log", "abs", "neg", "zero_", "add_", true)
      .Cases("mul_", "sub_", "div_", "copy_", "float", "half", true)
      .Default(false);
}

Sourced<DeviceValue>
TensorModel::evaluateDeviceSpec(const Expr *E, const TensorState &S) const {
  if (!E)
    return {DeviceValue::unknown(), {}};
  const Expr *Stripped = stripConversions(E);
  SourceLocation Loc = Stripped->getBeginLoc();
  if (const auto *Str = dyn_cast<StringLiteral>(Stripped))
    return {parseDeviceString(Str->getString()), Loc};
  if (const auto *Ref = dyn_cast<DeclRefExpr>(Stripped)) {
    if (const auto *EC = dyn_cast<EnumConstantDecl>(Ref->getDecl()))
      if (isDeviceTypeEnum(EC->getType()))
        return {deviceFromEnumName(EC->getName()), Loc};
    if (const auto *VD = dyn_cast<VarDecl>(Ref->getDecl()))
      if (isDeviceTypeEnum(VD->getType()) && VD->isConstexpr() &&
          VD->getName().starts_with("k"))
        return {deviceFromEnumName(VD->getName()), Loc};
  }
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(Stripped)) {
    // torch::Device(type, index).
    if (isDeviceType(Construct->getType()) && Construct->getNumArgs() >= 1) {
      Sourced<DeviceValue> Type = evaluateDeviceSpec(Construct->getArg(0), S);
      if (!Type.Value.isCUDA() || Construct->getNumArgs() < 2 ||
          isa<CXXDefaultArgExpr>(Construct->getArg(1)))
        return {Type.Value, Loc};
      Expr::EvalResult Index;
      if (!Construct->getArg(1)->isValueDependent() &&
          Construct->getArg(1)->EvaluateAsInt(Index, Ctx))
        return {DeviceValue::cuda(Index.Val.getInt().getExtValue()), Loc};
      return {DeviceValue::unknown(), Loc};
    }
  }
  return evaluate(Stripped, S).Device;
}

/// A device written out in place: a string, an enumerator, Device(...).
static bool isDeviceLiteral(const Expr *E) {
  if (isa<StringLiteral>(E))
    return true;
  if (const auto *Ref = dyn_cast<DeclRefExpr>(E))
    return isDeviceTypeEnum(Ref->getType()) &&
           (isa<EnumConstantDecl>(Ref->getDecl()) ||
            (isa<VarDecl>(Ref->getDecl()) &&
             cast<VarDecl>(Ref->getDecl())->isConstexpr()));
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(E))
    return isDeviceType(Construct->getType()) && Construct->getNumArgs() >= 1 &&
           !isDeviceType(Construct->getArg(0)->getType());
  return false;
}

std::optional<bool> TensorModel::evaluateBool(const Expr *E,
                                              const TensorState &S) const {
  if (!E)
    return std::nullopt;
  E = stripConversions(E); // c10::optional<bool>(true) holds true.
  bool Value = false;
  if (!E->isValueDependent() && E->EvaluateAsBooleanCondition(Value, Ctx))
    return Value;
  if (ValueKey Key = keyOf(E))
    if (const ValueFacts *F = S.lookup(Key))
      return F->BoolValue;
  return std::nullopt;
}

ValueFacts TensorModel::evaluateOptions(const Expr *E,
                                        const TensorState &S) const {
  ValueFacts F;
  const Expr *Stripped = stripConversions(E);
  const auto *Call = dyn_cast<CXXMemberCallExpr>(Stripped);
  if (!Call) {
    // A TensorOptions variable, or `torch::device(...)`, or a plain device.
    if (ValueKey Key = keyOf(Stripped))
      return isTensorOptionsType(Stripped->getType())
                 ? S.get(Key)
                 : evaluateDeclRef(*Stripped, Key, S);
    if (const auto *Free = dyn_cast<CallExpr>(Stripped)) {
      // torch::device(d), torch::dtype(t), torch::requires_grad(): a fresh
      // options value with one property set.
      const FunctionDecl *FD = Free->getDirectCallee();
      if (FD && FD->getIdentifier() && !isa<CXXMethodDecl>(FD) &&
          isTensorOptionsType(Free->getType()) &&
          (FD->getName() == "device" || FD->getName() == "dtype" ||
           FD->getName() == "layout" || FD->getName() == "requires_grad")) {
        F.Pin = {Pinning::Pageable, Free->getExprLoc()};
        if (FD->getName() == "device" && Free->getNumArgs() == 1)
          F.Device = evaluateDeviceSpec(Free->getArg(0), S);
        else
          F.DeviceUnset = true;
        return F;
      }
    }
    if (isa<CXXConstructExpr>(Stripped) &&
        isTensorOptionsType(Stripped->getType()) &&
        cast<CXXConstructExpr>(Stripped)->getNumArgs() == 0) {
      F.DeviceUnset = true; // TensorOptions()
      F.Pin = {Pinning::Pageable, Stripped->getExprLoc()};
      return F;
    }
    if (!isTensorOptionsType(Stripped->getType())) {
      F.Device = evaluateDeviceSpec(Stripped, S);
      F.Pin = {Pinning::Pageable, Stripped->getExprLoc()};
    } else if (isa<CXXConstructExpr>(Stripped) &&
             !cast<CXXConstructExpr>(Stripped)->getConstructor()->isCopyOrMoveConstructor())
      // TensorOptions(kHalf), TensorOptions(kStrided): no device.
    {
      F.DeviceUnset = !isDeviceType(cast<CXXConstructExpr>(Stripped)->getArg(0)->getType());
      F.Pin = {Pinning::Pageable, Stripped->getExprLoc()};
    }
    return F;
  }
  const CXXMethodDecl *MD = Call->getMethodDecl();
  if (tensorMethodName(*Call) == "options") {
    F.Device = evaluate(Call->getImplicitObjectArgument(), S).Device;
    return F;
  }
  if (!MD || !isTensorOptionsType(MD->getThisType()->getPointeeType()))
    return F;
  F = evaluateOptions(Call->getImplicitObjectArgument(), S);
  llvm::StringRef Name = MD->getIdentifier() ? MD->getName() : "";
  if (Name == "device" && Call->getNumArgs() >= 1) {
    F.DeviceUnset = false;
    // `.device(torch::kCUDA, 1)` constructs the Device from both arguments.
    if (Call->getNumArgs() == 2) {
      Sourced<DeviceValue> Type = evaluateDeviceSpec(Call->getArg(0), S);
      Expr::EvalResult Index;
      if (Type.Value.isCUDA() && !Call->getArg(1)->isValueDependent() &&
          Call->getArg(1)->EvaluateAsInt(Index, Ctx))
        Type.Value = DeviceValue::cuda(Index.Val.getInt().getExtValue());
      F.Device = Type;
    } else {
      F.Device = evaluateDeviceSpec(Call->getArg(0), S);
    }
  } else if (Name == "pinned_memory" && Call->getNumArgs() == 1) {
    std::optional<bool> Pinned = evaluateBool(Call->getArg(0), S);
    F.Pin = {Pinned ? (*Pinned ? Pinning::Pinned : Pinning::Pageable)
                    : Pinning::Unknown,
             Call->getExprLoc()};
  } else if (Name == "requires_grad") {
    F.Graph = {GraphState::Unknown, {}};
  }
  return F;
}

ValueFacts TensorModel::evaluateDeclRef(const Expr &E, ValueKey Key,
                                        const TensorState &S) const {
  if (const ValueFacts *F = S.lookup(Key))
    return *F;
  ValueFacts F;
  // A torch::Device that is not a known constant: the symbolic device
  // "whatever it holds".
  const NamedDecl *Holder = Key.Field ? static_cast<const NamedDecl *>(Key.Field)
                                      : Key.Base;
  if (isDeviceType(E.getType()) && Holder) {
    F.Device = {DeviceValue::symbolic(Holder), E.getBeginLoc()};
    return F;
  }
  // `batch.data` / `batch.target` of a torch::data loader's batch: the
  // loader collates on the CPU into pageable memory.
  if (Key.Base && Key.Field && isTensorType(E.getType())) {
    const auto *Batch = dyn_cast<VarDecl>(Key.Base);
    if (Batch && isDataExampleType(Batch->getType()) &&
        (Key.Field->getName() == "data" || Key.Field->getName() == "target")) {
      bool FromLoader = false;
      for (const auto &Parent : userCodeParents(*Batch, Ctx))
        if (const auto *DS = Parent.get<DeclStmt>())
          for (const auto &GrandParent : userCodeParents(*DS, Ctx))
            if (const auto *For = GrandParent.get<CXXForRangeStmt>())
              FromLoader = For->getLoopVarStmt() == DS;
      if (FromLoader) {
        F.Device = {DeviceValue::cpu(), Batch->getLocation()};
        F.Pin = {Pinning::Pageable, Batch->getLocation()};
        F.Graph = {GraphState::NoGraph, Batch->getLocation()};
      }
    }
  }
  return F;
}

ValueFacts TensorModel::evaluate(const Expr *E, const TensorState &S) const {
  ValueFacts F;
  if (!E)
    return F;
  E = stripConversions(E);
  if (const auto *Cond = dyn_cast<ConditionalOperator>(E))
    return joinFacts(evaluate(Cond->getTrueExpr(), S),
                     evaluate(Cond->getFalseExpr(), S));
  if (ValueKey Key = keyOf(E))
    return evaluateDeclRef(*E, Key, S);
  if (isDeviceLiteral(E)) {
    F.Device = evaluateDeviceSpec(E, S);
    return F;
  }
  if (isTensorOptionsType(E->getType()))
    return evaluateOptions(E, S);
  if (const auto *BO = dyn_cast<BinaryOperator>(E)) {
    if (BO->isAssignmentOp() || BO->getOpcode() == BO_Comma)
      return evaluate(BO->getOpcode() == BO_Comma ? BO->getRHS() : BO->getLHS(),
                      S);
    return F;
  }
  ModuleCall MC;
  if (matchModuleCall(*E, MC))
    return evaluateModuleCall(*E, MC, S);
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E)) {
    switch (Op->getOperator()) {
    case OO_Plus:
    case OO_Minus:
    case OO_Star:
    case OO_Slash:
      if (Op->getNumArgs() == 2 && isTensorType(Op->getType()))
        return evaluateOperator(*E, {Op->getArg(0), Op->getArg(1)}, S);
      return F;
    case OO_PlusEqual:
    case OO_MinusEqual:
    case OO_StarEqual:
    case OO_SlashEqual:
    case OO_Equal:
      return evaluate(Op->getArg(0), S);
    default:
      break;
    }
  }
  if (const auto *Call = dyn_cast<CallExpr>(E))
    return evaluateCall(*Call, S);
  return F;
}

ValueFacts TensorModel::evaluateOperator(const Expr &E,
                                         llvm::ArrayRef<const Expr *> Ops,
                                         const TensorState &S) const {
  ValueFacts F;
  bool AnyInGraph = false, AllNoGraph = true, First = true;
  F.MayBeZeroDim = true;
  for (const Expr *Op : Ops) {
    if (!isTensorType(Op->getType()))
      continue;
    ValueFacts OpFacts = evaluate(Op, S);
    if (First)
      F.Device = OpFacts.Device;
    else if (!(F.Device == OpFacts.Device))
      F.Device = {DeviceValue::unknown(), {}};
    First = false;
    AnyInGraph |= OpFacts.Graph.Value == GraphState::InGraph;
    AllNoGraph &= OpFacts.Graph.Value == GraphState::NoGraph;
    F.MayBeZeroDim &= OpFacts.MayBeZeroDim;
  }
  if (F.Device.Value.isKnown()) {
    F.Device.Origin = E.getExprLoc();
    F.Device.Via = nullptr;
  }
  if (isUnderNoGrad(E.getExprLoc()) || AllNoGraph)
    F.Graph = {GraphState::NoGraph, E.getExprLoc()};
  else if (AnyInGraph)
    F.Graph = {GraphState::InGraph, E.getExprLoc()};
  if (F.Device.Value.isCPU())
    F.Pin = {Pinning::Pageable, E.getExprLoc()};
  return F;
}

ValueFacts TensorModel::evaluateModuleCall(const Expr &E, const ModuleCall &MC,
                                           const TensorState &S) const {
  ValueFacts F;
  // A forward that runs returns on its input's device, which is the
  // module's.
  ValueFacts Module = evaluate(MC.Module, S);
  F.Device = Module.Device;
  if (!F.Device.Value.isKnown() && !MC.Inputs.empty()) {
    Sourced<DeviceValue> Input = evaluate(MC.Inputs[0], S).Device;
    if (Input.Value.isKnown() || !F.Device.Param)
      F.Device = Input;
  }
  if (F.Device.Value.isKnown()) {
    F.Device.Origin = E.getExprLoc();
    F.Device.Via = nullptr;
  }
  F.Graph = {isUnderNoGrad(E.getExprLoc()) ? GraphState::NoGraph
                                           : GraphState::InGraph,
             E.getExprLoc()};
  return F;
}

ValueFacts TensorModel::evaluateCall(const CallExpr &Call,
                                     const TensorState &S) const {
  ValueFacts F;
  SourceLocation Loc = Call.getExprLoc();
  llvm::StringRef Method = tensorMethodName(Call);
  if (!Method.empty()) {
    F = evaluateTensorMethod(Call, Method, S);
  } else if (const FunctionDecl *FD = Call.getDirectCallee()) {
    if (isTensorFactory(*FD, Opts)) {
      F = evaluateFactory(Call, S);
    } else if (isPinnedAllocator(*FD, Opts)) {
      F.Device = {DeviceValue::cpu(), Loc};
      F.Pin = {Pinning::Pinned, Loc};
      F.Graph = {GraphState::NoGraph, Loc};
    } else if (isLikeFactory(*FD) && Call.getNumArgs() >= 1) {
      ValueFacts Source = evaluate(Call.getArg(0), S);
      F.Device = {Source.Device.Value, Loc};
      for (const Expr *Arg : Call.arguments())
        if (isTensorOptionsType(Arg->getType()) && !isa<CXXDefaultArgExpr>(Arg)) {
          ValueFacts Options = evaluateOptions(Arg, S);
          if (Options.Device.Value.isKnown())
            F.Device = {Options.Device.Value, Loc};
        }
      if (F.Device.Value.isCPU() && Source.Pin.Value == Pinning::Pageable)
        F.Pin = {Pinning::Pageable, Loc};
      F.Graph = {GraphState::NoGraph, Loc};
      F.MayBeZeroDim = Source.MayBeZeroDim;
    } else if (isMultiTensorFunction(*FD)) {
      llvm::SmallVector<const Expr *, 4> Operands;
      for (const Expr *Arg : Call.arguments()) {
        const Expr *Stripped = stripConversions(Arg);
        if (const auto *List = dyn_cast<InitListExpr>(Stripped))
          Operands.append(List->inits().begin(), List->inits().end());
        else if (const auto *Std = dyn_cast<CXXStdInitializerListExpr>(Stripped))
          if (const auto *L = dyn_cast<InitListExpr>(stripConversions(Std->getSubExpr())))
            Operands.append(L->inits().begin(), L->inits().end());
        if (isTensorType(Arg->getType()))
          Operands.push_back(Arg);
      }
      F = evaluateOperator(Call, Operands, S);
      if (isLossFunction(*FD) && F.Graph.Value == GraphState::Unknown)
        F.Graph = {isUnderNoGrad(Loc) ? GraphState::NoGraph
                                      : GraphState::InGraph,
                   Loc};
      F.MayBeZeroDim = true;
    } else if (const FunctionSummary *Summary =
                   Program ? Program->summaryForCall(Call) : nullptr) {
      F = instantiate(Summary->Return, Call, *Summary, S);
    }
    // A helper such as pick_device() that proves no constant: whatever it
    // returns.
    if (isDeviceType(Call.getType()) && FD->getIdentifier() &&
        !isa<CXXMethodDecl>(FD) && !F.Device.Value.isKnown())
      F.Device = {DeviceValue::symbolic(FD), Loc};
  }
  if (const auto *MC = dyn_cast<CXXMemberCallExpr>(&Call))
    if (const CXXMethodDecl *MD = MC->getMethodDecl())
      if (MD->getIdentifier() && MD->getName() == "device" &&
          isTensorType(MD->getThisType()->getPointeeType()))
        F.Device = evaluate(MC->getImplicitObjectArgument(), S).Device;
  if (isTensorType(Call.getType()) && isUnderNoGrad(Loc))
    F.Graph = {GraphState::NoGraph, Loc};
  return F;
}

ValueFacts TensorModel::evaluateFactory(const CallExpr &Call,
                                        const TensorState &S) const {
  ValueFacts F;
  SourceLocation Loc = Call.getExprLoc();
  F.Device = {DeviceValue::cpu(), Loc};
  F.Graph = {GraphState::NoGraph, Loc};
  F.MayBeZeroDim = isScalarFactoryCall(Call);
  bool OptionsSayPinned = false, OptionsKnown = true;
  for (const Expr *Arg : Call.arguments()) {
    if (isa<CXXDefaultArgExpr>(Arg))
      continue;
    QualType T = Arg->getType();
    if (!isTensorOptionsType(T) && !isDeviceType(T) && !isDeviceTypeEnum(T))
      continue;
    ValueFacts Options = evaluateOptions(Arg, S);
    // Options without a device allocate on the CPU; options or a device we
    // cannot see through decide the device themselves.
    if (!Options.DeviceUnset)
      F.Device = {Options.Device.Value, Loc};
    OptionsSayPinned |= Options.Pin.Value == Pinning::Pinned;
    OptionsKnown &= Options.Pin.Value != Pinning::Unknown;
  }
  const FunctionDecl *FD = Call.getDirectCallee();
  // from_blob wraps memory the program allocated: its kind decides.
  bool FromUserMemory = FD && FD->getName() == "from_blob";
  if (F.Device.Value.isCPU()) {
    if (OptionsSayPinned)
      F.Pin = {Pinning::Pinned, Loc};
    else if (FromUserMemory && Call.getNumArgs() > 0)
      F.Pin = {userMemoryPinning(Call.getArg(0)), Loc};
    else if (OptionsKnown)
      F.Pin = {Pinning::Pageable, Loc};
    if (F.Pin.Value == Pinning::Unknown)
      F.Pin = {};
  }
  return F;
}

ValueFacts TensorModel::evaluateConversion(const CallExpr &Call,
                                           const ValueFacts &Source,
                                           const TensorState &S) const {
  // Tensor::to overloads: (TensorOptions, ...), (Device, ScalarType, ...),
  // (ScalarType, ...), (const Tensor &other, ...), and the 7-argument form.
  ValueFacts F = Source;
  SourceLocation Loc = Call.getExprLoc();
  Sourced<DeviceValue> Target{DeviceValue::unknown(), {}};
  bool DeviceChanges = false, PinRequested = false;
  if (const Expr *DeviceArg = argumentForParameter(Call, "device")) {
    Target = evaluateDeviceSpec(DeviceArg, S);
    DeviceChanges = true;
  } else if (const Expr *Other = argumentForParameter(Call, "other")) {
    Target = evaluate(Other, S).Device;
    DeviceChanges = true;
  } else if (const Expr *Options = argumentForParameter(Call, "options")) {
    ValueFacts O = evaluateOptions(Options, S);
    if (!O.DeviceUnset) {
      Target = O.Device;
      DeviceChanges = true;
    }
    PinRequested = O.Pin.Value == Pinning::Pinned;
  }
  if (DeviceChanges) {
    F.Device = {Target.Value, Loc};
    if (Target.Value.isCPU() && !Source.Device.Value.isCPU())
      F.Pin = {PinRequested ? Pinning::Pinned : Pinning::Pageable, Loc};
    else if (!Target.Value.isCPU())
      F.Pin = {Pinning::Unknown, {}};
  } else if (Source.Pin.Value == Pinning::Pinned) {
    // A dtype conversion allocates a new, pageable, tensor.
    F.Pin = {Pinning::Unknown, {}};
  }
  F.PendingDeviceToHostCopy = nullptr;
  if (Target.Value.isCPU() && Source.Device.Value.mayBeCUDA())
    if (std::optional<bool> NonBlocking =
            evaluateBool(argumentForParameter(Call, "non_blocking"), S))
      if (*NonBlocking)
        F.PendingDeviceToHostCopy = &Call;
  return F;
}

ValueFacts TensorModel::evaluateTensorMethod(const CallExpr &Call,
                                             llvm::StringRef Name,
                                             const TensorState &S) const {
  SourceLocation Loc = Call.getExprLoc();
  ValueFacts Source = evaluate(memberCallObject(Call), S);
  ValueFacts F;
  if (Name == "to")
    return evaluateConversion(Call, Source, S);
  if (Name == "cuda") {
    F = Source;
    F.Device = {DeviceValue::cuda(), Loc};
    F.Pin = {Pinning::Unknown, {}};
  } else if (Name == "cpu") {
    F = Source;
    F.PendingDeviceToHostCopy = nullptr;
    if (!Source.Device.Value.isCPU())
      F.Pin = {Pinning::Pageable, Loc};
    F.Device = {DeviceValue::cpu(), Loc};
  } else if (Name == "pin_memory") {
    F = Source;
    F.Device = {DeviceValue::cpu(), Loc};
    F.Pin = {Pinning::Pinned, Loc};
  } else if (Name == "detach" || Name == "detach_") {
    F = Source;
    F.Graph = {GraphState::NoGraph, Loc};
  } else if (Name.starts_with("new_")) {
    F.Device = {Source.Device.Value, Loc};
    for (const Expr *Arg : Call.arguments())
      if (isTensorOptionsType(Arg->getType()) && !isa<CXXDefaultArgExpr>(Arg)) {
        ValueFacts Options = evaluateOptions(Arg, S);
        if (Options.Device.Value.isKnown())
          F.Device = {Options.Device.Value, Loc};
      }
    if (F.Device.Value.isCPU())
      F.Pin = {Pinning::Pageable, Loc};
    F.Graph = {GraphState::NoGraph, Loc};
    F.MayBeZeroDim = false;
  } else if (isTensorType(Call.getType())) {
    // Every other tensor method computes on its receiver's device.
    F.Device = Source.Device;
    F.Graph = Source.Graph;
    bool InPlace = Call.getType()->isReferenceType();
    if (InPlace) {
      F.Pin = Source.Pin;
    } else if (Source.Device.Value.isCPU()) {
      F.Pin = {Pinning::Pageable, Loc};
    }
    if (Name == "requires_grad_")
      F.Graph = {GraphState::Unknown, {}};
    F.MayBeZeroDim = keepsShape(Name) ? Source.MayBeZeroDim : true;
    if (Name == "contiguous" || Name == "clone")
      F.Pin = Name == "clone" && Source.Device.Value.isCPU()
                  ? Sourced<Pinning>{Pinning::Pageable, Loc}
                  : Sourced<Pinning>{Source.Pin.Value == Pinning::Pinned
                                         ? Pinning::Unknown
                                         : Source.Pin.Value,
                                     Source.Pin.Origin};
  }
  return F;
}

} // namespace clang::tidy::torch
