//===--- EvaluateDevice.cpp - torch-tidy ----------------------------------===//
//
// FlowModel's devices and tensor options: the device a device-like
// expression names (a string, a DeviceType, torch::Device(type, index), a
// variable), and what a TensorOptions value says of where and how a factory
// allocates.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "api/Devices.h"
#include "api/TorchApi.h"
#include "api/TorchMatchers.h"
#include "clang/AST/ExprCXX.h"
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

Sourced<DeviceValue> FlowModel::evaluateDeviceSpec(const Expr *E,
                                                   const State &S) const {
  if (!E)
    return {};
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
      // A run-time ordinal: CUDA all the same, on no ordinal this TU can
      // name (it conflicts with no other CUDA device).
      return {DeviceValue::cuda(), Loc};
    }
  }
  return evaluate(Stripped, S).Device;
}

ValueFacts FlowModel::evaluateOptions(const Expr *E, const State &S) const {
  ValueFacts F;
  const Expr *Stripped = stripConversions(E);
  const auto *Call = dyn_cast<CXXMemberCallExpr>(Stripped);
  if (!Call) {
    // A TensorOptions variable, or `torch::device(...)`, or a plain device.
    if (Location L = locationOf(Stripped))
      return evaluateLocation(*Stripped, L, S);
    if (const auto *Free = dyn_cast<CallExpr>(Stripped);
        Free && !isDeviceType(Stripped->getType())) {
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
      return evaluateCall(*Free, S);
    }
    if (isa<CXXConstructExpr>(Stripped) &&
        isTensorOptionsType(Stripped->getType()) &&
        cast<CXXConstructExpr>(Stripped)->getNumArgs() == 0) {
      F.DeviceUnset = true; // TensorOptions()
      F.Pin = {Pinning::Pageable, Stripped->getExprLoc()};
      return F;
    }
    if (!isTensorOptionsType(Stripped->getType())) {
      // Options converted from one property: a device (a Device, a
      // DeviceType, a string) names where; a dtype, layout or memory
      // format names no device.
      QualType T = Stripped->getType();
      if (isDeviceType(T) || isDeviceTypeEnum(T) || isDeviceLiteral(Stripped))
        F.Device = evaluateDeviceSpec(Stripped, S);
      else if (T->isEnumeralType())
        F.DeviceUnset = true;
      else
        F.Device = evaluateDeviceSpec(Stripped, S);
      F.Pin = {Pinning::Pageable, Stripped->getExprLoc()};
    } else if (isa<CXXConstructExpr>(Stripped) &&
               !cast<CXXConstructExpr>(Stripped)
                    ->getConstructor()
                    ->isCopyOrMoveConstructor()) {
      // TensorOptions(kHalf), TensorOptions(kStrided): no device.
      F.DeviceUnset = !isDeviceType(
          cast<CXXConstructExpr>(Stripped)->getArg(0)->getType());
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
    return evaluateCall(*Call, S);
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
    F.Graph = {};
  }
  return F;
}

} // namespace clang::tidy::torch
