//===--- EvaluateTensor.cpp - torch-tidy ----------------------------------===//
//
// What LibTorch's tensor functions produce: operators and functions of
// tensors (where they compute, whether they record a graph), factories,
// conversions (`.to()`), and tensor methods.
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
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include "llvm/ADT/StringSwitch.h"

namespace clang::tidy::torch {

/// Tensor methods that return their receiver's storage, a same-shaped copy,
/// or a view of the same rank or more: the result is 0-dim only if the
/// receiver may be.
static bool keepsShape(llvm::StringRef Method) {
  return llvm::StringSwitch<bool>(Method)
      .Cases("to", "cuda", "cpu", "pin_memory", "contiguous", "clone", true)
      .Cases("detach", "detach_", "requires_grad_", "relu", "sigmoid", true)
      .Cases("tanh", "exp", "log", "abs", "neg", "zero_", "add_", true)
      .Cases("mul_", "sub_", "div_", "copy_", "float", "half", true)
      .Cases("narrow", "slice", "transpose", "permute", "t", "unsqueeze", true)
      .Cases("pow", "sqrt", "clamp", "round", "floor", "ceil", true)
      .Cases("remainder", "square", "softmax", "log_softmax", "masked_fill", true)
      .Cases("flip", "fliplr", "flipud", "roll", "cumsum", "cumprod", true)
      .Cases("sin", "cos", "sign", "fill_", "clamp_", "exp_", true)
      .Cases("clamp_min", "clamp_max", "clamp_min_", "clamp_max_", true)
      .Cases("where", "lerp", "nan_to_num", "sigmoid_", "relu_", true)
      .Cases("data", "triu", "tril", "triu_", "tril_", "masked_fill_", true)
      .Cases("logical_not", "bitwise_not", "logical_and", "logical_or", true)
      .Cases("eq", "ne", "gt", "lt", "ge", "le", true)
      .Cases("isnan", "isinf", "isfinite", "add", "sub", "mul", "div", true)
      .Default(isElementwiseFunction(Method));
}

/// Tensor methods that multiply or divide their receiver.
static bool scalesValue(llvm::StringRef Method) {
  return llvm::StringSwitch<bool>(Method)
      .Cases("mul", "mul_", "div", "div_", "multiply", "divide", true)
      .Cases("true_divide", "true_divide_", "multiply_", "divide_", true)
      .Default(false);
}

/// Tensor methods whose result has at least one dimension, whatever the
/// receiver's rank.
static bool addsDimension(llvm::StringRef Method) {
  return llvm::StringSwitch<bool>(Method)
      .Cases("flatten", "ravel", "unsqueeze", "atleast_1d", "nonzero", true)
      .Default(false);
}

/// Tensor methods whose first argument is the result's shape.
static bool spellsShape(llvm::StringRef Method) {
  return llvm::StringSwitch<bool>(Method)
      .Cases("view", "reshape", "expand", "repeat", "new_zeros", true)
      .Cases("new_ones", "new_empty", "new_full", true)
      .Default(false);
}

/// The number of dimensions a braced shape spells (`{1, 3, 1, 1}`: 4); 0
/// when it is not spelled.
static unsigned spelledRank(const Expr *Shape) {
  const Expr *E = stripConversions(Shape);
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(E);
      Construct && Construct->getNumArgs() == 1)
    E = stripConversions(Construct->getArg(0));
  if (const auto *Std = dyn_cast<CXXStdInitializerListExpr>(E))
    E = stripConversions(Std->getSubExpr());
  const auto *List = dyn_cast<InitListExpr>(E);
  return List ? List->getNumInits() : 0;
}

/// The dimensions a tensor method's result has at least, from its
/// receiver's \p Source: one more for `unsqueeze`, the spelled shape of a
/// `view({...})`, the receiver's for a method that keeps the shape (or a
/// reduction with `keepdim`), one fewer per dimension a reduction or a
/// `select` names (`mean(0)`, `sum({0, 1})`), and none known otherwise.
static uint8_t resultMinDims(const CallExpr &Call, llvm::StringRef Name,
                             uint8_t Source, std::optional<bool> KeepDim) {
  if (Name == "unsqueeze")
    return std::min<unsigned>(Source + 1u, 8);
  if (addsDimension(Name))
    return std::max<uint8_t>(Source, 1);
  if (keepsShape(Name) || isPointwise(Name) || (KeepDim && *KeepDim))
    return Source;
  if (spellsShape(Name) && Call.getNumArgs() >= 1)
    return std::min(spelledRank(Call.getArg(0)), 8u);
  const Expr *Dim = argumentForParameter(Call, "dim");
  if (!Dim || isa<CXXDefaultArgExpr>(Dim))
    return 0;
  unsigned Dropped = stripConversions(Dim)->getType()->isIntegerType()
                         ? 1
                         : spelledRank(Dim);
  return Dropped && Source > Dropped ? Source - Dropped : 0;
}

ValueFacts FlowModel::evaluateOperator(const Expr &E,
                                       llvm::ArrayRef<const Expr *> Ops,
                                       const State &S) const {
  llvm::SmallVector<ValueFacts, 4> Facts;
  for (const Expr *Op : Ops)
    if (isTensorType(Op->getType()))
      Facts.push_back(evaluate(Op, S));
  ValueFacts F = combineOperands(E, Facts, S);
  // A sum of mean losses is one; a product or a quotient is no plain mean
  // loss, whatever its operands (not merely unknown, which a caller's entry
  // value would fill in: `return loss / n;`).
  const auto *Call = dyn_cast<CXXOperatorCallExpr>(&E);
  bool Sum = Call && (Call->getOperator() == OO_Plus ||
                      Call->getOperator() == OO_Minus);
  bool Scales = Call && (Call->getOperator() == OO_Star ||
                         Call->getOperator() == OO_Slash);
  auto IsMean = [](const ValueFacts &O) { return O.MeanLoss == Tri::Yes; };
  // A float16 loss stays one in a sum (`recon + beta * kl`), divided, or
  // weighted down by a constant; a factor that may be large may be a loss
  // scale.
  SourceLocation Half;
  if (Sum || Scales)
    for (const ValueFacts &O : Facts)
      if (O.HalfAutocast.isValid() && Half.isInvalid())
        Half = O.HalfAutocast;
  if (Half.isValid() && Call && Call->getOperator() == OO_Star)
    for (const Expr *Op : Ops) {
      if (isTensorType(Op->getType()))
        continue;
      // (Through the conversion to a Scalar.)
      Expr::EvalResult Factor;
      const Expr *Constant = stripConversions(Op);
      double Value = 2.0;
      if (Constant->EvaluateAsRValue(Factor, Ctx)) {
        if (Factor.Val.isFloat())
          Value = Factor.Val.getFloat().convertToDouble();
        else if (Factor.Val.isInt())
          Value = double(Factor.Val.getInt().getExtValue());
      }
      if (!(std::abs(Value) <= 1.0))
        Half = SourceLocation();
    }
  if (Scales && Facts.size() != 1)
    Half = SourceLocation();
  setMeanLoss(F,
              Sum && !Facts.empty() && llvm::all_of(Facts, IsMean) ? Tri::Yes
              : Scales && !Facts.empty()                           ? Tri::No
                                                                   : Tri::Unknown,
              S);
  if (F.HalfAutocast.isInvalid())
    F.HalfAutocast = Half;
  // Comparisons and bitwise operators make bool or integer tensors, which
  // carry no graph (as `.gt()` and `.logical_and()` do not).
  if (Call && (Call->isComparisonOp() ||
               llvm::is_contained({OO_Amp, OO_Pipe, OO_Caret, OO_Tilde,
                                   OO_Exclaim},
                                  Call->getOperator()))) {
    F.Graph = {GraphState::NoGraph, E.getExprLoc()};
    F.GraphSources.clear();
  }
  return F;
}

void FlowModel::setMeanLoss(ValueFacts &F, Tri Mean, const State &S) const {
  F.MeanLoss = Mean;
  F.HalfAutocast = SourceLocation();
  stampAutocast(F, S);
}

void FlowModel::stampAutocast(ValueFacts &F, const State &S) const {
  const PathFacts &Path = S.path();
  if (F.MeanLoss == Tri::Yes && F.HalfAutocast.isInvalid() &&
      Path.Autocast == AutocastState::On && Path.AutocastHalf)
    F.HalfAutocast = Path.AutocastStart.second;
}

Tri meanLoss(const CallExpr &Call) {
  std::optional<bool> Mean = reducesToMean(Call);
  return !Mean ? Tri::Unknown : *Mean ? Tri::Yes : Tri::No;
}

/// \p F, a method's result from its receiver's graph so far, with the
/// graph of one more tensor argument \p Arg: a graph when either has one,
/// none when neither has.
static void addArgumentGraph(ValueFacts &F, const ValueFacts &Arg) {
  for (const Stmt *Source : Arg.GraphSources)
    if (!llvm::is_contained(F.GraphSources, Source))
      F.GraphSources.push_back(Source);
  if (Arg.Graph.Value == GraphState::NoGraph ||
      F.Graph.Value == GraphState::InGraph)
    return;
  if (Arg.Graph.Value == GraphState::InGraph ||
      F.Graph.Value == GraphState::NoGraph) {
    F.Graph = Arg.Graph;
    return;
  }
  // Two values the callers give: a graph when either has one.
  auto Plain = [](const Sourced<GraphState> &G) {
    return G.Entry && !G.AlsoEntry && G.Otherwise == GraphState();
  };
  if (Plain(F.Graph) && Plain(Arg.Graph) && F.Graph.Entry != Arg.Graph.Entry) {
    F.Graph.AlsoEntry = Arg.Graph.Entry;
    return;
  }
  if (!(Plain(F.Graph) && Plain(Arg.Graph)))
    F.Graph = {};
}

ValueFacts FlowModel::combineOperands(const Expr &E,
                                      llvm::ArrayRef<ValueFacts> Ops,
                                      const State &S) const {
  ValueFacts F;
  bool AnyInGraph = false, AllNoGraph = true, First = true;
  // The entry values of the operands whose graph is not known.
  llvm::SmallVector<const ValueDecl *, 2> GraphEntries;
  F.MinDims = 0;
  // An op that runs computes where its operands are: a known device (other
  // than a possibly 0-dim CPU tensor, which may meet any device) decides
  // over unknown ones; known devices that differ decide nothing. Else the
  // entry values ("whatever this parameter's tensor is on") decide: at most
  // two, which the callers' facts settle.
  std::optional<Sourced<DeviceValue>> Decided, FromEntry, Accelerator;
  bool Conflict = false, EntryConflict = false, Accelerators = false;
  // Only CPU tensors (0-dim or not) compute on the CPU.
  bool AllCPU = !Ops.empty();
  for (const ValueFacts &OpFacts : Ops) {
    if (First)
      F.Device = OpFacts.Device;
    else if (F.Device != OpFacts.Device)
      F.Device = {};
    First = false;
    AllCPU &= OpFacts.Device.Value.isCPU();
    if (OpFacts.Device.Value.isKnown() &&
        !(OpFacts.Device.Value.isCPU() && OpFacts.mayBeZeroDim())) {
      if (!Decided)
        Decided = OpFacts.Device;
      else if (Decided->Value != OpFacts.Device.Value)
        Conflict = true;
      else if (Decided->Entry != OpFacts.Device.Entry)
        Decided->Entry = Decided->AlsoEntry = nullptr;
      if (!OpFacts.Device.Value.isCPU()) {
        if (!Accelerator)
          Accelerator = OpFacts.Device;
        else if (Accelerator->Value != OpFacts.Device.Value)
          Accelerators = true;
      }
    } else if (OpFacts.Device.Entry && !OpFacts.Device.Value.isKnown()) {
      // If the op runs, its operands share one device: any of them names
      // it. Two entries are kept; an alternative ("one of two holders")
      // gives way to an operand that is one.
      if (!FromEntry) {
        FromEntry = OpFacts.Device;
      } else if (FromEntry->EitherEntry && OpFacts.Device.EitherEntry) {
        EntryConflict = true;
      } else if (FromEntry->EitherEntry) {
        FromEntry = OpFacts.Device;
      } else if (!OpFacts.Device.EitherEntry) {
        for (const ValueDecl *E :
             {OpFacts.Device.Entry, OpFacts.Device.AlsoEntry})
          if (E && E != FromEntry->Entry && !FromEntry->AlsoEntry)
            FromEntry->AlsoEntry = E;
      }
    }
    AnyInGraph |= OpFacts.Graph.Value == GraphState::InGraph;
    AllNoGraph &= OpFacts.Graph.Value == GraphState::NoGraph;
    if (OpFacts.Graph.Value == GraphState::Unknown)
      GraphEntries.push_back(OpFacts.Graph.Entry);
    F.FromDeviceConflict |= OpFacts.FromDeviceConflict;
    if (!F.ConflictIf)
      F.ConflictIf = OpFacts.ConflictIf;
    F.MinDims = std::max(F.MinDims, OpFacts.MinDims); // broadcast
    for (const Stmt *A : OpFacts.GraphSources)
      if (!llvm::is_contained(F.GraphSources, A))
        F.GraphSources.push_back(A);
  }
  if (Decided && !Conflict) {
    F.Device = *Decided;
    // An operand whose device the callers give must be there too.
    if (FromEntry && !FromEntry->AlsoEntry && !FromEntry->Value.isKnown() &&
        !F.ConflictIf)
      F.ConflictIf = FromEntry->Entry;
  }
  // Operands proven apart: the op fails (reported here). Its value is where
  // the fix puts it, on the accelerator operand's device, for the checks
  // that ask where the code means to compute; for device-mismatch it, and
  // what is computed from it, decide nothing (one report per mistake).
  if (Conflict) {
    F.Device = Accelerator && !Accelerators ? *Accelerator
                                            : Sourced<DeviceValue>();
    F.FromDeviceConflict = true;
  } else if (!Decided && FromEntry && !EntryConflict)
    F.Device = *FromEntry;
  else if (!Decided && AllCPU)
    F.Device = {DeviceValue::cpu(), E.getExprLoc()};
  if (F.Device.Value.isKnown() && !F.Device.Entry) {
    F.Device.Origin = E.getExprLoc();
    F.Device.Via = nullptr;
  }
  if (S.path().Grad == GradMode::Disabled || AllNoGraph)
    F.Graph = {GraphState::NoGraph, E.getExprLoc()};
  else if (AnyInGraph)
    F.Graph = {GraphState::InGraph, E.getExprLoc()};
  else if (GraphEntries.size() == 1 && GraphEntries[0] &&
           GraphEntries[0] == F.Device.Entry && !F.Device.AlsoEntry &&
           S.path().Grad != GradMode::Unknown)
    // One operand the callers hand over, the others without a graph
    // (`loss * n`, `log_softmax(logits, 1)`): its graph, whatever it is.
    F.Graph.Entry = GraphEntries[0];
  else if (GraphEntries.size() == 2 && GraphEntries[0] && GraphEntries[1] &&
           GraphEntries[0] != GraphEntries[1] &&
           S.path().Grad != GradMode::Unknown) {
    // Two (`(logits * weights).mean()`): a graph when either has one.
    F.Graph.Entry = GraphEntries[0];
    F.Graph.AlsoEntry = GraphEntries[1];
  }
  // A computed tensor is a fresh allocation, never pinned: on the host, it
  // is pageable wherever its operands' device is decided (a callee's result
  // on its parameter's device is pageable where the caller's is the CPU).
  F.Pin = {Pinning::Pageable, E.getExprLoc()};
  return F;
}

ValueFacts FlowModel::evaluateFactory(const CallExpr &Call,
                                      const State &S) const {
  ValueFacts F;
  SourceLocation Loc = Call.getExprLoc();
  F.Device = {DeviceValue::cpu(), Loc};
  F.Graph = {GraphState::NoGraph, Loc};
  // `torch::zeros({})` is 0-dim; a size the code does not spell may be;
  // `torch::tensor(values)`, `torch::arange(n)` have one dimension.
  F.MinDims = isScalarFactoryCall(Call) ? 0 : 1;
  if (const Expr *Size = argumentForParameter(Call, "size"))
    F.MinDims = std::min<unsigned>(spelledRank(Size), 8);
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
    if (!Options.DeviceUnset) {
      F.Device = Options.Device;
      F.Device.Origin = Loc;
    }
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

ValueFacts FlowModel::evaluateConversion(const CallExpr &Call,
                                         const ValueFacts &Source,
                                         const State &S) const {
  // Tensor::to overloads: (TensorOptions, ...), (Device, ScalarType, ...),
  // (ScalarType, ...), (const Tensor &other, ...), and the 7-argument form.
  ValueFacts F = Source;
  SourceLocation Loc = Call.getExprLoc();
  Sourced<DeviceValue> Target;
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
    F.Device = Target;
    F.Device.Origin = Loc;
    F.Device.Via = nullptr;
    if (Target.Value.isCPU() && !Source.Device.Value.isCPU())
      F.Pin = {PinRequested ? Pinning::Pinned : Pinning::Pageable, Loc};
    else if (!Target.Value.isCPU())
      F.Pin = {};
  } else if (Source.Pin.Value == Pinning::Pinned) {
    // A dtype conversion allocates a new, pageable, tensor.
    F.Pin = {};
  }
  F.clearPendingCopy();
  // From a parameter's tensor that the callers may place on CUDA, the copy
  // is pending if they do.
  const auto *Parameter = dyn_cast_or_null<ParmVarDecl>(Source.Device.Entry);
  bool MayBeCUDA = Source.Device.Value.mayBeCUDA();
  if (Target.Value.isCPU() &&
      (MayBeCUDA || (Parameter && !Source.Device.Value.isKnown())))
    if (std::optional<bool> NonBlocking =
            evaluateBool(argumentForParameter(Call, "non_blocking"), S))
      if (*NonBlocking) {
        F.PendingCopy = Call.getExprLoc();
        F.PendingIf = MayBeCUDA ? nullptr : Parameter;
      }
  return F;
}

ValueFacts FlowModel::evaluateTensorMethod(const CallExpr &Call,
                                           llvm::StringRef Name,
                                           const State &S) const {
  SourceLocation Loc = Call.getExprLoc();
  ValueFacts Source = evaluate(memberCallObject(Call), S);
  ValueFacts F;
  if (Name == "to")
    return evaluateConversion(Call, Source, S);
  if (Name == "cuda") {
    F = Source;
    F.Device = {DeviceValue::cuda(), Loc};
    F.Pin = {};
  } else if (Name == "cpu") {
    F = Source;
    F.clearPendingCopy();
    if (!Source.Device.Value.isCPU())
      F.Pin = {Pinning::Pageable, Loc};
    F.Device = {DeviceValue::cpu(), Loc};
  } else if (Name == "pin_memory") {
    F = Source;
    F.Device = {DeviceValue::cpu(), Loc};
    F.Pin = {Pinning::Pinned, Loc};
  } else if (Name == "detach" || Name == "detach_" || Name == "data") {
    F = Source;
    F.Graph = {GraphState::NoGraph, Loc};
    F.GraphSources.clear();
  } else if (Name.starts_with("new_")) {
    F.Device = {Source.Device.Value, Loc};
    F.Device.Entry = Source.Device.Entry;
    for (const Expr *Arg : Call.arguments())
      if (isTensorOptionsType(Arg->getType()) && !isa<CXXDefaultArgExpr>(Arg)) {
        ValueFacts Options = evaluateOptions(Arg, S);
        if (Options.Device.Value.isKnown())
          F.Device = {Options.Device.Value, Loc};
      }
    if (F.Device.Value.isCPU())
      F.Pin = {Pinning::Pageable, Loc};
    F.Graph = {GraphState::NoGraph, Loc};
    F.MinDims = 1;
  } else if (isTensorType(Call.getType())) {
    // Every other tensor method computes on its receiver's device, from
    // its receiver and its tensor arguments (`u.matmul(items.t())`).
    F.Device = Source.Device;
    F.FromDeviceConflict = Source.FromDeviceConflict;
    F.Graph = Source.Graph;
    F.GraphSources = Source.GraphSources;
    for (const Expr *Arg : Call.arguments())
      if (isTensorType(Arg->getType()))
        addArgumentGraph(F, evaluate(Arg, S));
    bool InPlace = Call.getType()->isReferenceType();
    if (InPlace) {
      F.Pin = Source.Pin;
      F.PendingCopy = Source.PendingCopy;
      F.PendingVia = Source.PendingVia;
      F.PendingIf = Source.PendingIf;
    } else if (isViewMethod(Name)) {
      // The receiver's memory, a copy into it still under way included.
      F.Pin = Source.Pin;
      F.PendingCopy = Source.PendingCopy;
      F.PendingVia = Source.PendingVia;
      F.PendingIf = Source.PendingIf;
    } else if (Source.Device.Value.isCPU()) {
      F.Pin = {Pinning::Pageable, Loc};
    }
    if (Name == "requires_grad_")
      F.Graph = {};
    // `loss.div(n)`, `loss.mul_(w)`: a scaled loss, no plain mean one.
    setMeanLoss(F, scalesValue(Name) ? Tri::No : meanLoss(Call), S);
    // A reduction that keeps its dimensions keeps the rank.
    std::optional<bool> KeepDim =
        evaluateBool(argumentForParameter(Call, "keepdim"), S);
    F.MinDims = resultMinDims(Call, Name, Source.MinDims, KeepDim);
    if (Name == "contiguous" || Name == "clone")
      F.Pin = Name == "clone" && Source.Device.Value.isCPU()
                  ? Sourced<Pinning>{Pinning::Pageable, Loc}
                  : Sourced<Pinning>{Source.Pin.Value == Pinning::Pinned
                                         ? Pinning::Unknown
                                         : Source.Pin.Value,
                                     Source.Pin.Origin};
    if (S.path().Grad == GradMode::Disabled || returnsNoGraph(Name)) {
      F.Graph = {GraphState::NoGraph, Loc};
      if (returnsNoGraph(Name))
        F.GraphSources.clear();
    }
  } else if (Call.getType()->isBooleanType() || Call.getType()->isIntegerType()) {
    // `.item<bool>()`, `.numel()`: host scalars.
  }
  return F;
}

/// Whether \p T is a std::vector of tensors (what `chunk`, `split`,
/// `unbind` and `meshgrid` return).
static bool isTensorVector(QualType T) {
  const auto *RD = dyn_cast_or_null<ClassTemplateSpecializationDecl>(
      T.getNonReferenceType()->getAsCXXRecordDecl());
  return RD && isStdClass(RD, "vector") && RD->getTemplateArgs().size() >= 1 &&
         RD->getTemplateArgs()[0].getKind() == TemplateArgument::Type &&
         isTensorType(RD->getTemplateArgs()[0].getAsType());
}

std::optional<ValueFacts>
FlowModel::tensorTupleElement(const Expr &E, unsigned Index,
                              const State &S) const {
  const auto *Call = dyn_cast<CallExpr>(stripConversions(&E));
  if (!Call)
    return std::nullopt;
  // A vector of tensors: every element alike.
  bool IsVector = isTensorVector(Call->getType());
  const auto *Tuple = dyn_cast_or_null<ClassTemplateSpecializationDecl>(
      Call->getType()->getAsCXXRecordDecl());
  if (!IsVector) {
    if (!Tuple || !isStdClass(Tuple, "tuple") ||
        Tuple->getTemplateArgs().size() != 1 ||
        Tuple->getTemplateArgs()[0].getKind() != TemplateArgument::Pack)
      return std::nullopt;
    llvm::ArrayRef<TemplateArgument> Elements =
        Tuple->getTemplateArgs()[0].pack_elements();
    if (Index >= Elements.size() ||
        Elements[Index].getKind() != TemplateArgument::Type ||
        !isTensorType(Elements[Index].getAsType()))
      return std::nullopt;
  }
  // The element is computed where the operands are, as a method's or a
  // function's tensor result is.
  llvm::StringRef Name = tensorMethodName(*Call);
  ValueFacts Source;
  if (!Name.empty()) {
    Source = evaluate(memberCallObject(*Call), S);
  } else {
    const FunctionDecl *FD = Call->getDirectCallee();
    if (!FD || !FD->getIdentifier() || !isTorchFunction(*FD))
      return std::nullopt;
    Name = FD->getName();
    llvm::SmallVector<const Expr *, 4> Candidates, Operands;
    functionOperands(*Call, Candidates);
    for (const Expr *Op : Candidates)
      if (isTensorType(Op->getType()))
        Operands.push_back(Op);
    if (Operands.empty())
      return std::nullopt;
    Source = evaluateOperator(*Call, Operands, S);
  }
  SourceLocation Loc = Call->getExprLoc();
  ValueFacts F;
  F.Device = Source.Device;
  F.FromDeviceConflict = Source.FromDeviceConflict;
  if (F.Device.Value.isCPU())
    F.Pin = {Pinning::Pageable, Loc};
  // Which elements are values (with the operands' graph) is known only for
  // (values, indices) results; any other element's graph stays unknown.
  if (S.path().Grad == GradMode::Disabled ||
      (returnsValuesAndIndices(Name) && Index == 1)) {
    F.Graph = {GraphState::NoGraph, Loc};
  } else if (returnsValuesAndIndices(Name) && Index == 0) {
    F.Graph = Source.Graph;
    F.GraphSources = Source.GraphSources;
  }
  return F;
}

} // namespace clang::tidy::torch
