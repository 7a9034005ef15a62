//===--- Facts.h - torch-tidy -----------------------------------*- C++ -*-===//
//
// What the one dataflow engine knows about a value at a program point, and
// about the path that reaches it:
//  - value facts (ValueFacts): device, memory kind, autograd graph, a pending
//    asynchronous copy to the host, the module facts, the known value of a
//    scalar and what a branch on it proves;
//  - path facts (PathFacts): CUDA availability checked or not, the device
//    count proven, whether autograd records.
//
// A fact may stand for "whatever X held when the function was entered"
// (its Entry is set): a parameter, a member of `*this`, a global, a captured
// variable. Summaries are written in those terms and instantiated at each
// call; calling contexts give them values from the callers.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_FACTS_H
#define TORCH_TIDY_MODEL_FACTS_H

#include "DeviceLattice.h"
#include "clang/AST/Decl.h"
#include "clang/AST/Expr.h"
#include "clang/Basic/SourceLocation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include <limits>
#include <optional>

namespace clang::tidy::torch {

/// Whether host memory is page-locked.
enum class Pinning : unsigned char { Unknown, Pinned, Pageable };

/// Whether a tensor keeps an autograd graph alive.
enum class GraphState : unsigned char { Unknown, InGraph, NoGraph };

/// Whether a module runs in training or evaluation mode. TrainOnSomePath:
/// paths that reach here disagree, and one of them leaves it training.
enum class ModuleMode : unsigned char { Unknown, Train, Eval, TrainOnSomePath };

/// A truth that a function's callers decide: one of its parameters, never
/// written in its body, as a bool (`on`) or compared with a constant
/// (`phase == Phase::Fit`), maybe negated.
struct ParameterTest {
  const ParmVarDecl *Param = nullptr;
  std::optional<int64_t> Equals;
  bool Negated = false;
  explicit operator bool() const { return Param; }
  bool operator==(const ParameterTest &O) const {
    return Param == O.Param && Equals == O.Equals && Negated == O.Negated;
  }
};

/// Yes, no, or not proven.
enum class Tri : unsigned char { Unknown, Yes, No };

/// One step of the path by which a fact crossed calls: the call, in the
/// caller, of the function whose code established it. Steps are interned by
/// the ProgramModel and live as long as it; a path lists the outermost call
/// first.
struct CallStep {
  SourceLocation Call;
  /// How notes name the callee: "'make_background()'".
  llvm::StringRef Callee;
  const CallStep *Next = nullptr;
};

/// One fact with the place that established it, for notes.
///
/// With Entry set, the fact stands for "whatever Entry held when the
/// function was entered" (a ParmVarDecl, the FieldDecl of a member of
/// `*this`, a global or captured VarDecl); Value is then what the calling
/// context says (unknown when it says nothing).
template <typename T> struct Sourced {
  T Value{};
  SourceLocation Origin;
  const ValueDecl *Entry = nullptr;
  /// A second entry value that an operation combined with Entry's (`a - b`
  /// of two parameters): the same device if the operation runs, so the
  /// callers' facts of either decide; a graph when either has one. Only
  /// devices and graphs have one.
  const ValueDecl *AlsoEntry = nullptr;
  /// Entry and AlsoEntry are alternatives, not one device: the value is one
  /// of the two (paths or container elements that hold either), so the
  /// callers' facts decide only when they agree.
  bool EitherEntry = false;
  /// The calls through which the fact reached this function; null when it
  /// was established here.
  const CallStep *Via = nullptr;
  /// With Entry and no Value: the value on the paths that did not keep the
  /// entry value (`if (c) m.train();`, a loop that may run zero times). The
  /// callers' value of Entry joined with it decides. Not for devices.
  T Otherwise{};
  bool operator==(const Sourced &O) const {
    return Value == O.Value && Entry == O.Entry && AlsoEntry == O.AlsoEntry &&
           EitherEntry == O.EitherEntry && Otherwise == O.Otherwise;
  }
  bool operator!=(const Sourced &O) const { return !(*this == O); }
  bool isKnown() const { return !(Value == T()); }
};

/// What taking a branch on a bool proves about the machine.
struct Implication {
  /// CUDA is available.
  bool Cuda = false;
  /// At least this many CUDA devices exist (0: nothing proven).
  int64_t CountAtLeast = 0;
  bool operator==(const Implication &O) const {
    return Cuda == O.Cuda && CountAtLeast == O.CountAtLeast;
  }
  bool empty() const { return !Cuda && CountAtLeast == 0; }
};

/// What is known of a bool or integer value.
struct ScalarFacts {
  std::optional<int64_t> Known;
  /// The value is the number of CUDA devices, or, on some paths, one of
  /// OrKnown's constants (`single ? 1 : device_count()`).
  bool IsDeviceCount = false;
  llvm::SmallVector<int64_t, 2> OrKnown;
  /// What a branch on the value proves when it is true / false.
  Implication IfTrue, IfFalse;
  /// The comparison that proves a device count, for notes.
  const Expr *CountComparison = nullptr;
  bool operator==(const ScalarFacts &O) const {
    return Known == O.Known && IsDeviceCount == O.IsDeviceCount &&
           OrKnown == O.OrKnown && IfTrue == O.IfTrue && IfFalse == O.IfFalse;
  }
  bool empty() const {
    return !Known && !IsDeviceCount && IfTrue.empty() && IfFalse.empty();
  }
};

/// Merges what two paths know of a scalar. A constant side cannot take the
/// branch that contradicts it, so there the other side's implication holds.
ScalarFacts joinScalars(const ScalarFacts &A, const ScalarFacts &B);

/// A device count that proves every ordinal (a comparison against a value
/// the program picks).
constexpr int64_t EveryDevice = std::numeric_limits<int64_t>::max();

struct ValueFacts {
  Sourced<DeviceValue> Device{DeviceValue::unknown(), {}};
  Sourced<Pinning> Pin{Pinning::Unknown, {}};
  Sourced<GraphState> Graph{GraphState::Unknown, {}};
  /// Modules: training or evaluation mode, and whether they hold a layer
  /// whose behaviour depends on it (Dropout, BatchNorm, ...).
  Sourced<ModuleMode> Mode{ModuleMode::Unknown, {}};
  /// A mode the callers decide (`module.train(on)`): training where the
  /// test holds, evaluation where it does not; Mode is Unknown.
  ParameterTest ModeIf;
  Tri ModeLayers = Tri::Unknown;
  /// Modules: No when the module provably has no parameters or buffers
  /// (a loss module): it has no device to mismatch.
  Tri HasParameters = Tri::Unknown;
  /// Yes: a loss reduced to its mean over the batch (`.mean()`, a loss
  /// function or loss module with the default reduction, or a sum of such)
  /// that nothing multiplied or divided since. For a loss module: its
  /// forward returns one.
  Tri MeanLoss = Tri::Unknown;
  /// A mean loss computed in a float16 autocast region, or a sum, quotient
  /// or down-weighting of one (nothing that may be a loss scale multiplied
  /// it since): where that region was switched on.
  SourceLocation HalfAutocast;
  /// A non-blocking device-to-host copy that produced this value and that
  /// no synchronisation has completed yet, on every path; invalid otherwise.
  SourceLocation PendingCopy;
  const CallStep *PendingVia = nullptr;
  /// The copy is pending only when this parameter's tensor was on CUDA (its
  /// callers decide): null when it is pending whatever the callers pass.
  const ValueDecl *PendingIf = nullptr;
  /// No pending copy.
  void clearPendingCopy() {
    PendingCopy = SourceLocation();
    PendingVia = nullptr;
    PendingIf = nullptr;
  }
  /// A new tensor that a conversion (`t.to(device)`, `t.cuda()`) returned,
  /// on every path, and that nothing stored outside its function: a caller
  /// that discards it loses the conversion. The conversion, and the calls
  /// that returned its result.
  SourceLocation ConvertedCopy;
  const CallStep *ConvertedVia = nullptr;
  void clearConvertedCopy() {
    ConvertedCopy = SourceLocation();
    ConvertedVia = nullptr;
  }
  /// Ints and strings: a CUDA ordinal above 0 written as a literal (`1`,
  /// `"cuda:1"`) that this value is, on some path, and where it is written.
  SourceLocation OrdinalSpelled;
  int64_t SpelledOrdinal = 0;
  /// The tensor has at least this many dimensions (0: it may be 0-dim); a
  /// 0-dim CPU tensor may be combined with CUDA tensors by element-wise
  /// operators.
  uint8_t MinDims = 0;
  bool mayBeZeroDim() const { return MinDims == 0; }
  /// Computed by an op whose operands are on devices proven apart: it fails
  /// there (reported there). Its device is the accelerator operand's, where
  /// the fix would compute it; no later operation is judged a mismatch on it.
  bool FromDeviceConflict = false;
  /// Computed by an op that combined this device with an entry value of
  /// unknown device (`local + offsets_` in a helper): where a caller passes
  /// that entry value on another device, the op fails there (reported
  /// there), and this value comes from a conflict.
  const ValueDecl *ConflictIf = nullptr;
  /// A TensorOptions value that provably names no device: factories then
  /// allocate on the CPU, and `.to(options)` keeps the tensor's device.
  bool DeviceUnset = false;
  /// Bools and integers.
  ScalarFacts Scalar;
  /// The lambdas and functions a callable (a lambda, a std::function, a
  /// function pointer, the elements of a container of them) holds on some
  /// path, in the order they were met.
  llvm::SmallVector<const FunctionDecl *, 1> Callables;
  /// Every path knows what it holds: Callables is all it may hold.
  bool CallablesKnown = false;
  /// A callable parameter, or a callable field of one (`cfg.on_step`), as
  /// it was at entry: what it holds, where Callables says nothing, is what
  /// the caller passed there. One level of fields.
  struct ParameterPart {
    const ParmVarDecl *Param = nullptr;
    /// Null for the parameter itself.
    const FieldDecl *Field = nullptr;
    explicit operator bool() const { return Param; }
    bool operator==(const ParameterPart &O) const {
      return Param == O.Param && Field == O.Field;
    }
  };
  ParameterPart CallablesAtEntry;
  /// The member functions among Callables run on `*this` of the function
  /// that holds the value (`std::bind(&Trainer::step, this, _1)`), on every
  /// path; otherwise their object is unknown where they are called.
  bool CallablesOnThis = false;
  /// The statements whose autograd graph this value keeps alive: the module
  /// forwards it was computed from and the accumulations that added to it
  /// (some path).
  llvm::SmallVector<const Stmt *, 1> GraphSources;
  /// No value yet: the element of an empty container, a default-constructed
  /// tensor or holder. The bottom of the lattice: a join keeps the other side.
  bool Empty = false;
  /// A part of a parameter that the function changed in place (`s.net->
  /// train()`, `s.total.add_(x)`) without reading it first: the facts it
  /// does not establish are what the caller's storage held.
  bool KeepsCallerFacts = false;

  bool operator==(const ValueFacts &O) const;
  bool operator!=(const ValueFacts &O) const { return !(*this == O); }
  /// Nothing known: the top of the lattice.
  bool isUnknown() const { return *this == ValueFacts(); }

  /// "Whatever \p Holder held at entry", for every fact a call can carry.
  static ValueFacts atEntry(const ValueDecl &Holder);
  /// These facts with their entry tags dropped; values stay (for facts that
  /// outlive the function).
  ValueFacts withoutEntries() const;
  /// Whether any fact stands for an entry value.
  bool dependsOnEntry() const;
  /// The one function a callable certainly holds; null when it may hold
  /// another or nothing is known.
  const FunctionDecl *callable() const {
    return CallablesKnown && Callables.size() == 1 ? Callables[0] : nullptr;
  }
  /// Holds \p F and nothing else.
  void setCallable(const FunctionDecl *F, bool OnThis = false) {
    Callables.assign(1, F);
    CallablesKnown = true;
    CallablesOnThis = OnThis;
  }
};

/// \p F, what the callers pass for \p D, tagged as D's entry value, the way
/// the summary analysis starts (parametricEntry): a device variable is the
/// symbolic device it names unless the callers agree on one. A parameter
/// arrives with no pending copy: the call that passes one reads it.
ValueFacts asEntryValue(ValueFacts F, const ValueDecl &D);

/// \p Changed, a value a callee changed in place, over what the caller's
/// storage held before the call (\p Old): the facts the callee did not
/// establish stay the caller's, and so do the graphs an element keeps.
ValueFacts overCallerFacts(ValueFacts Changed, const ValueFacts &Old);

/// Merges the facts of two paths: what both prove survives; a graph source
/// on either path survives (a "some path" fact); an Empty side keeps the
/// other.
ValueFacts joinFacts(const ValueFacts &A, const ValueFacts &B);

/// Whether CUDA was checked on the paths that reach a point.
enum class CudaGuard : unsigned char {
  /// Some path reaches it without CUDA: never checked since the program
  /// started, or known unavailable.
  Unguarded,
  /// Not checked in this function: the callers decide.
  Entry,
  /// Every path passed a successful availability check.
  Checked,
};

/// Whether autocast is on at a point (thread-wide state).
enum class AutocastState : unsigned char {
  /// As at function entry: the callers decide.
  Entry,
  Off,
  /// On, on some path.
  On,
  /// Restored to a saved value, or set from a run-time value.
  Unknown,
  /// Set from a bool parameter of the function, never written
  /// (`void amp(bool on) { set_autocast_enabled(kCUDA, on); }`): on exactly
  /// when the caller passes true.
  AsParameter,
};

/// Whether autograd records at a point.
enum class GradMode : unsigned char {
  /// As at function entry: the callers decide.
  Entry,
  Enabled,
  Disabled,
  /// Set from a run-time value.
  Unknown,
};

/// Facts about the path, not about one value.
struct PathFacts {
  bool hasUncheckedCuda(const Expr *Use) const {
    for (const auto &U : UncheckedCuda)
      if (U.first == Use)
        return true;
    return false;
  }
  CudaGuard Cuda = CudaGuard::Entry;
  /// The CUDA device count proven on every path (0: nothing; the callers'
  /// bound adds to it), and the comparison that proves it.
  int64_t CountAtLeast = 0;
  const Expr *CountProof = nullptr;
  GradMode Grad = GradMode::Entry;
  /// The RAII guards alive on this path, each with the grad mode its
  /// destructor restores.
  llvm::SmallVector<std::pair<const VarDecl *, GradMode>, 1> GradGuards;
  /// CUDA selections made where CUDA was not checked and not yet known to
  /// have a CPU fallback (torch-cuda-unguarded), in the order they ran, each
  /// with the guard state where it ran.
  llvm::SmallVector<std::pair<const Expr *, CudaGuard>, 2> UncheckedCuda;
  /// Every call that leads here (from other TUs of an audit) comes after an
  /// unchecked CUDA selection: the path's first one was reported there.
  bool CudaSelectedBefore = false;
  /// Availability checks on the paths so far, for notes.
  llvm::SmallVector<const Expr *, 1> AvailabilityChecks;
  /// Graph sources that a backward() reached, and that went where the
  /// analysis cannot follow (an opaque call), on some path.
  llvm::SmallVector<const Stmt *, 2> GraphsBackpropagated;
  llvm::SmallVector<const Stmt *, 2> GraphsEscaped;
  /// Optimizer steps after which no gradient reset ran, on some path: the
  /// next backward() adds to the gradients they applied. Each is the
  /// statement here (a step, or a call that leaves one) and where the step
  /// is (in the callee, for a call).
  llvm::SmallVector<std::pair<const Stmt *, SourceLocation>, 1>
      StepsWithoutReset;
  /// Every path reset the gradients since the function's entry: the
  /// callers' steps no longer reach a backward() here.
  bool GradientsResetSinceEntry = false;
  /// backward() calls whose gradients no step applied and no reset cleared
  /// yet, on some path (the statement here, and where the backward() is):
  /// the next backward() adds to them.
  llvm::SmallVector<std::pair<const Stmt *, SourceLocation>, 1>
      BackwardsNotStepped;
  /// Those of BackwardsNotStepped whose pending gradients a branch on a
  /// counter (`++i % N`, `micro_ < accum_`) left unapplied on some path:
  /// accumulation by design, not a skipped iteration (`if (!ok) continue;`).
  llvm::SmallVector<std::pair<const Stmt *, SourceLocation>, 1>
      BackwardsCounted;
  /// Some path took a branch on a counter since the function's entry.
  bool CounterBranch = false;
  /// A branch on a counter: the pending backward() calls are counted.
  void countPendingBackwards();
  /// Optimizer steps run on some path (the statement here, and where the
  /// step is).
  llvm::SmallVector<std::pair<const Stmt *, SourceLocation>, 1> StepsRun;
  /// Every path stepped or reset the gradients since the function's entry:
  /// the callers' backward() calls no longer add to the ones here.
  bool GradientsSettledSinceEntry = false;
  /// Some path rescaled the gradients in place (`p.grad() /= n`).
  bool GradientsRescaled = false;
  /// Autocast; when On, where the region began (the statement here that
  /// switched it on, or the call that left it on, and where the switch is)
  /// and whether it computes in float16.
  AutocastState Autocast = AutocastState::Entry;
  /// The parameter, for AsParameter.
  const ParmVarDecl *AutocastParam = nullptr;
  std::pair<const Stmt *, SourceLocation> AutocastStart{nullptr, {}};
  bool AutocastHalf = false;
  /// The bool conditions that held where the region was switched on: a
  /// branch that refutes one (`if (amp)` ... `if (amp) off();`) is a path
  /// where it never was.
  llvm::SmallVector<const Expr *, 1> AutocastIf;
  /// The bool conditions (a variable, a member) that a branch proved true
  /// on every path here.
  llvm::SmallVector<const Expr *, 2> ConditionsHeld;
  /// CUDA autocast's dtype is float16 (the default at program start);
  /// AsEntry: nothing set it since the function's entry (the callers'
  /// dtype), and the region that is on uses it.
  Tri CudaAutocastHalf = Tri::Unknown;
  bool CudaDtypeAsEntry = true;
  bool AutocastHalfAsEntry = false;
  /// The dtype over the paths that set one (a helper that sets it on some
  /// paths); SomeEntry: some path set none since the function's entry.
  Tri CudaDtypeHalfWhereSet = Tri::Unknown;
  bool CudaDtypeSomeEntry = true;
  /// Every path here set CUDA autocast's dtype to \p Half.
  void setCudaDtype(Tri Half) {
    CudaAutocastHalf = CudaDtypeHalfWhereSet = Half;
    CudaDtypeAsEntry = CudaDtypeSomeEntry = false;
  }
  /// The entry values whose graphs (the callers') a backward() reached on
  /// some path; BackpropagatedOther: it also reached a value that is none of
  /// them, which may hold any caller's graph.
  llvm::SmallVector<const ValueDecl *, 1> EntriesBackpropagated;
  bool BackpropagatedOther = false;
  /// Some path ran code that may switch any module's mode through a handle
  /// it holds (a callable whose contents are unknown): no mode known before
  /// it holds after it, wherever the module is held.
  bool ModesClobbered = false;
  /// CPU selections made on this path: a branch that picks the CPU where the
  /// other picks CUDA is a fallback.
  llvm::SmallVector<const Expr *, 2> CpuSelections;

  bool operator==(const PathFacts &O) const;
  bool operator!=(const PathFacts &O) const { return !(*this == O); }
};

/// Adds the members of \p From missing from \p Into, keeping Into's order.
template <typename T>
void unite(llvm::SmallVectorImpl<T> &Into, llvm::ArrayRef<T> From) {
  for (const T &X : From)
    if (!llvm::is_contained(Into, X))
      Into.push_back(X);
}

/// Merges the path facts of two paths. \p AKeptCpu (\p BKeptCpu): that
/// path still holds a CPU selection's value where the other holds CUDA, a
/// CPU fallback as much as a CPU selection on a branch of its own.
PathFacts joinPaths(const PathFacts &A, const PathFacts &B,
                    bool AKeptCpu = false, bool BKeptCpu = false);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_FACTS_H
