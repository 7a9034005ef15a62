//===--- EvaluateCall.cpp - torch-tidy ------------------------------------===//
//
// FlowModel::evaluateCall: the facts of the value a call returns: a tensor
// method's or LibTorch function's, a factory's, or what the summary of the
// function it runs (a callable's target, a virtual call's overrides) says.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "ProgramModel.h"
#include "Summary.h"
#include "api/Devices.h"
#include "api/Losses.h"
#include "api/StdLibrary.h"
#include "api/TorchMatchers.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

ValueFacts FlowModel::evaluateCall(const CallExpr &Call,
                                   const State &S) const {
  ValueFacts F;
  SourceLocation Loc = Call.getExprLoc();
  llvm::StringRef Method = tensorMethodName(Call);
  const FunctionDecl *FD = Call.getDirectCallee();
  // What the call returns when it runs \p Summary's function as \p R.
  auto ReturnedBy = [&](const ResolvedCall &R, const FunctionSummary &Summary) {
    ValueFacts One = instantiate(Summary.returned(), R, S);
    if (!Summary.leavesNoTrace())
      One.clearConvertedCopy();
    if (isTensorType(Call.getType()))
      keepArgumentGraphs(R, S, One);
    return One;
  };
  if (const Expr *Module = moduleMethodCallReceiver(Call, "is_training")) {
    // The module's mode, kept for `train(was_training)` to restore.
    ValueFacts Held = evaluate(Module, S);
    F.Mode = Held.Mode;
    F.ModeIf = Held.ModeIf;
    if (Held.Mode.Value == ModuleMode::Train ||
        Held.Mode.Value == ModuleMode::Eval)
      F.Scalar.Known = Held.Mode.Value == ModuleMode::Train;
  } else if (const Expr *Registered = registeredValue(Call)) {
    // `fc = register_module("fc", Linear(4, 2))`: the layers of the module
    // registered. (Its device and mode are its owner's, which a later
    // `to()` or `train()` switches: enclosingModuleFacts.)
    ValueFacts Module = evaluate(Registered, S);
    F.ModeLayers = Module.ModeLayers;
    F.HasParameters = Module.HasParameters;
  } else if (auto Targets = callableHolder(Call)
                                ? possibleCallableTargets(Call, S)
                                : llvm::SmallVector<const FunctionDecl *, 1>();
             !Targets.empty()) {
    // A std::function or function pointer that holds known functions: what
    // one of them returns (a criterion set on either branch of a
    // constructor).
    std::optional<ValueFacts> Joined;
    for (const FunctionDecl *Target : Targets) {
      const FunctionSummary *Summary = Program.summary(*Target);
      if (!Summary) {
        Joined = ValueFacts();
        break;
      }
      ValueFacts One = ReturnedBy(resolveAs(Call, *Target, S), *Summary);
      Joined = Joined ? joinFacts(*Joined, One) : One;
    }
    F = *Joined;
    stampAutocast(F, S);
  } else if (!Method.empty()) {
    F = evaluateTensorMethod(Call, Method, S);
    F.clearConvertedCopy();
    if (isTensorConversionMethod(Method, options()) &&
        !Call.getType()->isReferenceType() && isTensorType(Call.getType()))
      F.ConvertedCopy = Loc;
  } else if (std::optional<ValueFacts> Element = tupleGetOfTensorCall(Call, S)) {
    F = *Element; // `std::get<0>(t.max(1))`
  } else if (FD) {
    if (isTensorFactory(*FD, options())) {
      F = evaluateFactory(Call, S);
    } else if (isPinnedAllocator(*FD, options())) {
      F.Device = {DeviceValue::cpu(), Loc};
      F.Pin = {Pinning::Pinned, Loc};
      F.Graph = {GraphState::NoGraph, Loc};
    } else if (isLikeFactory(*FD) && Call.getNumArgs() >= 1) {
      ValueFacts Source = evaluate(Call.getArg(0), S);
      F.Device = {Source.Device.Value, Loc};
      F.Device.Entry = Source.Device.Entry;
      for (const Expr *Arg : Call.arguments())
        if (isTensorOptionsType(Arg->getType()) && !isa<CXXDefaultArgExpr>(Arg)) {
          ValueFacts Options = evaluateOptions(Arg, S);
          if (Options.Device.Value.isKnown())
            F.Device = {Options.Device.Value, Loc};
        }
      if (F.Device.Value.isCPU() && Source.Pin.Value == Pinning::Pageable)
        F.Pin = {Pinning::Pageable, Loc};
      F.Graph = {GraphState::NoGraph, Loc};
      F.MinDims = Source.MinDims;
    } else if (isTensorType(Call.getType()) && isTorchFunction(*FD)) {
      // Every other LibTorch function of tensors (cat, matmul, softmax,
      // isnan, the functional losses, ...) computes on its operands' device.
      llvm::SmallVector<const Expr *, 4> Operands;
      functionOperands(Call, Operands);
      // `torch::stack(losses)`: a container's elements are operands too.
      llvm::SmallVector<ValueFacts, 4> Facts;
      for (const Expr *Op : Operands)
        if (std::optional<ValueFacts> Operand = evaluateOperand(*Op, S))
          Facts.push_back(*Operand);
      F = combineOperands(Call, Facts, S);
      if (FD->getIdentifier() && returnsNoGraph(FD->getName())) {
        F.Graph = {GraphState::NoGraph, Call.getExprLoc()};
        F.GraphSources.clear();
      }
      setMeanLoss(F, meanLoss(Call), S);
      if (isLossFunction(*FD) && F.Graph.Value == GraphState::Unknown &&
          S.path().Grad != GradMode::Disabled)
        F.Graph = {GraphState::InGraph, Loc};
      // An operator broadcasts, and an element-wise function keeps its
      // operand's shape: 0-dim only when every operand may be (as
      // combineOperands found); other functions may reduce.
      std::optional<unsigned> Joined =
          FD->getIdentifier() ? joinedRank(FD->getName(), F.MinDims)
                              : std::nullopt;
      if (Joined)
        F.MinDims = *Joined;
      else if (!FD->isOverloadedOperator() &&
               !(FD->getIdentifier() && (isPointwise(FD->getName()) ||
                                         keepsRankFunction(FD->getName()))))
        F.MinDims = 0;
    } else if (const FunctionSummary *Summary = summaryAt(Call, S)) {
      ResolvedCall R = resolve(Call);
      F = instantiate(Summary->returned(), R, S);
      if (Location There = returnedArgumentPart(*Summary, R))
        if (const ValueFacts *Held = S.lookup(There)) {
          F = overCallerFacts(F, *Held);
          // A copy into that storage still under way (a getter of a
          // member a non-blocking copy wrote), unless the call waits.
          if (!F.PendingCopy.isValid() && !Summary->MaySynchronize) {
            F.PendingCopy = Held->PendingCopy;
            F.PendingVia = Held->PendingVia;
            F.PendingIf = Held->PendingIf;
          }
        }
      if (!Summary->leavesNoTrace())
        F.clearConvertedCopy();
      stampAutocast(F, S);
      if (isTensorType(Call.getType()))
        keepArgumentGraphs(R, S, F);
      // A module's own method that runs its layers (`model->embed(x)`) is
      // a forward of the module: its output's graph is this call's.
      if (ModuleCall Run; F.Graph.Value == GraphState::InGraph &&
                          Summary->RunsOwnLayers && runsModule(Call, Run) &&
                          !llvm::is_contained(F.GraphSources, &Call))
        F.GraphSources.push_back(&Call);
    } else if (const Expr *Object = memberCallObject(Call);
               Object && isModuleHandleType(Object->getType()) &&
               FD->getIdentifier() && FD->getName() == "clone") {
      // `net->clone()` keeps the device of the module it copies;
      // `net->clone(device)` copies it onto that device.
      F = evaluate(Object, S);
      if (Call.getNumArgs() >= 1 && !isa<CXXDefaultArgExpr>(Call.getArg(0))) {
        F.Device = evaluateDeviceSpec(Call.getArg(0), S);
        F.Device.Origin = Loc;
      }
    } else if (const Expr *Device; isScriptModuleLoad(Call, Device)) {
      // Mapped onto `device`, or on the devices it was saved from.
      F = newModuleFacts(Call.getType(), Loc);
      F.Device = {};
      if (Device)
        F.Device = evaluateDeviceSpec(Device, S);
    } else if (isSmartPointerCast(*FD)) {
      F = evaluate(Call.getArg(0), S);
    } else if (isStdAccumulate(*FD) && isTensorType(Call.getType()) &&
               Call.getNumArgs() >= 3) {
      // `std::accumulate(parts.begin(), parts.end(), init)`: the initial
      // value and every element, summed.
      llvm::SmallVector<ValueFacts, 2> Facts{evaluate(Call.getArg(2), S)};
      if (const Expr *Range = iteratedContainer(*Call.getArg(0)))
        if (std::optional<ValueFacts> Elements = evaluateOperand(*Range, S))
          Facts.push_back(*Elements);
      F = combineOperands(Call, Facts, S);
    } else if (isOwnerFactory(FD) && isModuleHandleType(Call.getType())) {
      // std::make_shared<Net>(...) handed on as it is made
      // (`zoo.emplace(name, std::make_shared<Net>(w))`): a module built here.
      F = newModuleFacts(Call.getType(), Loc);
    } else if (ProgramModel::Dispatched Overrides =
                   Program.dispatchedSummaries(Call);
               !Overrides.empty()) {
      // A virtual call of uncertain target: what one of the overrides the
      // TU defines returns.
      std::optional<ValueFacts> Joined;
      for (const auto &[Override, Summary] : Overrides) {
        ResolvedCall R = resolve(Call);
        R.Callee = Override;
        ValueFacts One = ReturnedBy(R, *Summary);
        Joined = Joined ? joinFacts(*Joined, One) : One;
      }
      F = *Joined;
      stampAutocast(F, S);
    }
    // A helper such as pick_device() that proves no constant: whatever it
    // returns.
    if (isDeviceType(Call.getType()) && FD->getIdentifier() &&
        !isa<CXXMethodDecl>(FD) && !F.Device.Value.isKnown())
      F.Device = {DeviceValue::symbolic(FD), Loc};
  }
  if (tensorMethodName(Call) == "device")
    F.Device = evaluate(memberCallObject(Call), S).Device;
  if (isTensorType(Call.getType()) && S.path().Grad == GradMode::Disabled)
    F.Graph = {GraphState::NoGraph, Loc};
  return F;
}

} // namespace clang::tidy::torch
