//===--- EvaluateModule.cpp - torch-tidy ----------------------------------===//
//
// The facts of module values: a module built here, what its class tells
// (parameters, mode-dependent layers), a submodule or tensor member moving
// with its module, and what a module call returns.
//
//===----------------------------------------------------------------------===//

#include "FlowModel.h"
#include "ProgramModel.h"
#include "Summary.h"
#include "api/Losses.h"
#include "api/TorchMatchers.h"
#include "support/UserCodeParents.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"

namespace clang::tidy::torch {

/// Whether a module has parameters, and mode-dependent layers, is its
/// class's: a loss module has none wherever it is held.
void FlowModel::withClassFacts(ValueFacts &Module, QualType ModuleType) const {
  const ModuleClassFacts &Class = Program.moduleClassFacts(ModuleType);
  if (Module.HasParameters == Tri::Unknown)
    Module.HasParameters = Class.HasParameters;
  if (Module.ModeLayers == Tri::Unknown)
    Module.ModeLayers = Class.ModeLayers;
}

std::optional<ValueFacts>
FlowModel::enclosingModuleFacts(const Location &L, const State &S) const {
  // A LibTorch module's tensor member (`linear->weight`) is one of its
  // registered parameters or buffers, and a module's submodule member is
  // registered: they move with the module, and train()/eval() switch a
  // submodule with its owner. (A user module's plain tensor member moves
  // only if it registered it.)
  const FieldDecl *Field = L.Depth ? L.last().asField() : nullptr;
  if (!Field || !isModuleHandleType(Ctx.getRecordType(Field->getParent())))
    return std::nullopt;
  QualType T = Field->getType();
  bool Submodule = isModuleHandleType(T);
  if (!(isTensorType(T) && isSystemHeaderDecl(*Field, Ctx.getSourceManager())) &&
      !Submodule)
    return std::nullopt;
  const ValueFacts *Module = S.lookup(L.parent());
  if (!Module)
    return std::nullopt;
  ValueFacts Part;
  bool Known = false;
  if (Module->Device.Value.isKnown() || Module->Device.Entry) {
    Part.Device = {Module->Device.Value, Module->Device.Origin};
    // A summary's module of unknown device: the callers' module decides.
    if (!Module->Device.Value.isKnown())
      Part.Device.Entry = Module->Device.Entry;
    Known = true;
  }
  if (Submodule && (Module->Mode.Value != ModuleMode::Unknown ||
                    Module->Mode.Entry)) {
    Part.Mode = Module->Mode;
    withClassFacts(Part, T);
    Known = true;
  }
  if (!Known)
    return std::nullopt;
  return Part;
}

bool FlowModel::runsModule(const CallExpr &Call, ModuleCall &Out) const {
  if (matchModuleCall(Call, Out))
    return true;
  ModuleCall Method;
  const FunctionSummary *Summary = nullptr;
  if (!matchOwnModuleMethodCall(Call, Method) ||
      !(Summary = Program.summaryForCall(Call)) || !Summary->RunsOwnLayers)
    return false;
  Out = Method;
  return true;
}

bool FlowModel::isOwnLayer(const ModuleCall &Run) const {
  const auto *Method = dyn_cast_or_null<CXXMethodDecl>(Function);
  if (!Method || Method->isStatic() || Run.TypeErased ||
      !isModuleHandleType(Ctx.getRecordType(Method->getParent())))
    return false;
  // Anything a module's own forward runs; elsewhere, one of its layers, or
  // the module itself (`forward(x)` in `score()`) in a method whose calls
  // run this body (a virtual hook's callers may name only its base).
  if (Method->getIdentifier() && Method->getName() == "forward")
    return true;
  Location L = locationOf(Run.Module);
  return L.Kind == Location::This && (L.Depth > 0 || !Method->isVirtual());
}

ValueFacts FlowModel::evaluateModuleCall(const Expr &E, const ModuleCall &MC,
                                         const State &S) const {
  ValueFacts F;
  // A forward whose body the model knows returns what its summary proves:
  // it may move its input (`x.to(device_)`). Otherwise a forward that runs
  // returns on its input's device, which is the module's.
  ValueFacts Module = MC.TypeErased ? ValueFacts() : evaluate(MC.Module, S);
  // A loss module has no parameters however it is reached (a parameter).
  withClassFacts(Module, MC.Module->getType().getNonReferenceType());
  const auto *Call = dyn_cast<CallExpr>(&E);
  // An output that is its input passed through (a parameter's entry
  // value) is on the module's device when that is known: a forward that
  // runs moved nothing.
  const FunctionSummary *Summary =
      Call ? Program.summaryForCall(*Call) : nullptr;
  if (Summary)
    if (const ValueFacts Returned = Summary->returned();
        !isa_and_nonnull<ParmVarDecl>(Returned.Device.Entry) ||
        !Module.Device.Value.isKnown())
      F.Device = instantiate(Returned, resolve(*Call), S).Device;
  if (!F.Device.Value.isKnown()) {
    F.Device = Module.Device;
    if (!MC.Inputs.empty()) {
      Sourced<DeviceValue> Input = evaluate(MC.Inputs[0], S).Device;
      // A parameterless module (a loss) computes on its input's device,
      // whatever device its callers' handle is said to be on.
      if (Module.HasParameters == Tri::No ||
          (!F.Device.Value.isKnown() &&
           (Input.Value.isKnown() || !F.Device.Entry)))
        F.Device = Input;
      // The input proves the same device without the callers' module.
      else if (F.Device.Entry && !Input.Entry && Input.Value.isKnown() &&
               Input.Value == F.Device.Value)
        F.Device = Input;
    }
  }
  if (F.Device.Value.isKnown() && !F.Device.Entry) {
    F.Device.Origin = E.getExprLoc();
    F.Device.Via = nullptr;
  }
  // A module called with an input on another device fails (reported
  // there): what is computed from its output decides nothing more.
  if (Module.HasParameters != Tri::No && !MC.Inputs.empty()) {
    ValueFacts In = evaluate(MC.Inputs[0], S);
    F.FromDeviceConflict |= In.FromDeviceConflict ||
                            compareDevices(Module.Device.Value,
                                           In.Device.Value) !=
                                DeviceConflict::None;
  }
  if (S.path().Grad == GradMode::Disabled)
    F.Graph = {GraphState::NoGraph, E.getExprLoc()};
  else if (S.path().Grad == GradMode::Enabled ||
           S.path().Grad == GradMode::Entry)
    F.Graph = {GraphState::InGraph, E.getExprLoc()};
  // The forward's graph, and its inputs', stay alive as long as the output;
  // so do the graphs of the submodule calls its body returns.
  if (Summary && F.Graph.Value == GraphState::InGraph)
    F.GraphSources = Summary->returned().GraphSources;
  for (const Expr *In : MC.Inputs)
    for (const Stmt *Source : evaluate(In, S).GraphSources)
      if (!llvm::is_contained(F.GraphSources, Source))
        F.GraphSources.push_back(Source);
  if (F.Graph.Value == GraphState::InGraph &&
      !llvm::is_contained(F.GraphSources, &E))
    F.GraphSources.push_back(&E);
  if (Module.MeanLoss == Tri::Yes ||
      (Summary && Summary->returned().MeanLoss == Tri::Yes))
    setMeanLoss(F, Tri::Yes, S);
  // A parameterless module (a loss) records a graph only from its inputs.
  if (Module.HasParameters == Tri::No && F.Graph.Value == GraphState::InGraph) {
    bool AnyGraph = false;
    for (const Expr *In : MC.Inputs)
      AnyGraph |= evaluate(In, S).Graph.Value != GraphState::NoGraph;
    if (!AnyGraph)
      F.Graph = {GraphState::NoGraph, E.getExprLoc()};
  }
  return F;
}

bool FlowModel::anyModeLayer(llvm::ArrayRef<const Expr *> Args) const {
  return llvm::any_of(Args, [&](const Expr *Arg) {
    QualType T = stripConversions(Arg)->getType().getNonReferenceType();
    return isModuleHandleType(T) &&
           Program.moduleClassFacts(T).ModeLayers == Tri::Yes;
  });
}

ValueFacts FlowModel::newModuleFacts(QualType ModuleType,
                                     SourceLocation Loc) const {
  ValueFacts F;
  const ModuleClassFacts &Class = Program.moduleClassFacts(ModuleType);
  if (!Class.ConstructorMoves)
    F.Device = {DeviceValue::cpu(), Loc};
  F.HasParameters = Class.HasParameters; // none for a parameterless one
  F.ModeLayers = Class.ModeLayers;
  F.Mode = {ModuleMode::Train, Loc};
  if (std::optional<bool> Mean = lossModuleReducesToMean(ModuleType, nullptr))
    F.MeanLoss = *Mean ? Tri::Yes : Tri::No; // its default options
  return F;
}

ValueFacts FlowModel::evaluateConstruction(const CXXConstructExpr &E,
                                           const State &S) const {
  ValueFacts F;
  QualType T = E.getType();
  if (isModuleHandleType(T)) {
    if (E.getNumArgs() == 1 && E.getArg(0)->getType()->isNullPtrType()) {
      F.Empty = true;
      return F;
    }
    // `Net(std::shared_ptr<NetImpl>)`: a holder of a module that exists.
    if (E.getNumArgs() == 1 && isModuleHandleType(E.getArg(0)->getType()) &&
        E.getArg(0)->getType()->getAsCXXRecordDecl() &&
        !E.getConstructor()->isCopyOrMoveConstructor())
      return evaluate(E.getArg(0), S);
    F = newModuleFacts(T, E.getExprLoc());
    // `Sequential(Linear(...), Dropout(...))`: a container holds the
    // layers it is built from.
    if (F.ModeLayers != Tri::Yes && anyModeLayer({E.getArgs(), E.getNumArgs()}))
      F.ModeLayers = Tri::Yes;
    std::optional<bool> Mean = lossModuleReducesToMean(T, &E);
    F.MeanLoss = !Mean ? Tri::Unknown : *Mean ? Tri::Yes : Tri::No;
    return F;
  }
  if (isTensorType(T) && E.getNumArgs() == 0) {
    F.Empty = true; // an undefined tensor
    return F;
  }
  return F;
}

} // namespace clang::tidy::torch
