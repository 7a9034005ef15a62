//===--- TensorModel.h - torch-tidy -----------------------------*- C++ -*-===//
//
// The transfer functions of the tensor flow analysis: what an expression's
// value is (evaluate) and how a statement changes the state (transfer).
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_ANALYSIS_TENSORMODEL_H
#define TORCH_TIDY_ANALYSIS_TENSORMODEL_H

#include "TensorFacts.h"
#include "api/TorchApi.h"
#include "clang/AST/ASTContext.h"
#include "clang/AST/Stmt.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

namespace clang::tidy::torch {

/// Lexical regions of one function where autograd is off
/// (torch::NoGradGuard, c10::InferenceMode, torch::AutoGradMode(false)).
class NoGradRegions {
public:
  explicit NoGradRegions(const ASTContext &Ctx);
  void addRanges(llvm::ArrayRef<SourceRange> R) { Ranges.append(R.begin(), R.end()); }
  bool contains(SourceLocation Loc) const;
  bool empty() const { return Ranges.empty(); }

private:
  const SourceManager &SM;
  llvm::SmallVector<SourceRange, 2> Ranges;
};

class ProgramModel;
struct FunctionSummary;

/// Knows how LibTorch operations move, pin, and attach values to the graph,
/// and, through the ProgramModel's summaries, what user functions do.
class TensorModel {
public:
  TensorModel(const Decl &Function, const Stmt &Body, ASTContext &Ctx,
              const TorchApiOptions &Opts, ProgramModel *Program = nullptr);

  /// The facts of the value \p E computes, in state \p S.
  ValueFacts evaluate(const Expr *E, const TensorState &S) const;
  /// The device a device-like expression (Device, DeviceType, string,
  /// TensorOptions) names; Unknown when it names none.
  Sourced<DeviceValue> evaluateDeviceSpec(const Expr *E,
                                          const TensorState &S) const;
  /// The value a bool expression has, when known.
  std::optional<bool> evaluateBool(const Expr *E, const TensorState &S) const;

  /// Applies the effect of \p S (one node; its children are applied before)
  /// to \p State.
  void transfer(const Stmt &S, TensorState &State) const;
  /// Narrows \p State on the edge where \p Cond evaluated to \p Taken.
  void refineOnBranch(const Expr *Cond, bool Taken, TensorState &State) const;
  /// Applies a constructor's member initialiser.
  void initializeMember(const CXXCtorInitializer &Init,
                        TensorState &State) const;

  /// The facts \p Summary gives for its return value, or for the exit state
  /// of one location, as seen by the caller at \p Call: parameters are
  /// replaced with the arguments' facts in \p S, and the facts established in
  /// the callee remember the call in their path.
  ValueFacts instantiate(const ValueFacts &InCallee, const CallExpr &Call,
                         const FunctionSummary &Summary,
                         const TensorState &S) const;
  Sourced<DeviceValue> instantiate(const Sourced<DeviceValue> &InCallee,
                                   const CallExpr &Call,
                                   const TensorState &S) const;
  /// The argument \p Call passes for the callee's parameter \p P.
  static const Expr *argumentFor(const CallExpr &Call, const ParmVarDecl &P);
  ProgramModel *program() const { return Program; }

  /// The storage location \p E denotes, when it is a tracked one.
  ValueKey keyOf(const Expr *E) const;

  /// Whether a tensor read at \p E completes earlier non-blocking copies:
  /// a blocking read of a CUDA tensor waits for its stream.
  bool isBlockingDeviceRead(const CallExpr &Call, const TensorState &S) const;
  /// True when \p E is a host read of its operand \p Operand (item,
  /// data_ptr, accessor, streaming, comparison, a function argument).
  static const Expr *hostReadOperand(const Stmt &S);
  /// Every operand \p S reads on the host: hostReadOperand's, plus the
  /// tensor variables passed as arguments to a function outside LibTorch
  /// and the standard library (a user helper, a lambda, a function pointer).
  static void hostReadOperands(const Stmt &S,
                               llvm::SmallVectorImpl<const Expr *> &Out);

  bool isUnderNoGrad(SourceLocation Loc) const { return NoGrad.contains(Loc); }
  const TorchApiOptions &options() const { return Opts; }
  ASTContext &context() const { return Ctx; }

private:
  ValueFacts evaluateCall(const CallExpr &Call, const TensorState &S) const;
  ValueFacts evaluateTensorMethod(const CallExpr &Call, llvm::StringRef Name,
                                  const TensorState &S) const;
  ValueFacts evaluateConversion(const CallExpr &Call, const ValueFacts &Source,
                                const TensorState &S) const;
  ValueFacts evaluateFactory(const CallExpr &Call, const TensorState &S) const;
  ValueFacts evaluateOperator(const Expr &E, llvm::ArrayRef<const Expr *> Ops,
                              const TensorState &S) const;
  ValueFacts evaluateDeclRef(const Expr &E, ValueKey Key,
                             const TensorState &S) const;
  ValueFacts evaluateModuleCall(const Expr &E, const ModuleCall &MC,
                                const TensorState &S) const;
  /// Facts of a freshly built TensorOptions chain (`.device().pinned_memory()`).
  ValueFacts evaluateOptions(const Expr *E, const TensorState &S) const;
  void assign(ValueKey Key, QualType Type, const Expr *Init, SourceLocation Loc,
              TensorState &State) const;
  void applyCallEffects(const CallExpr &Call, TensorState &State) const;
  /// Applies the effects a user function's summary lists.
  void applySummaryEffects(const CallExpr &Call, const FunctionSummary &Summary,
                           TensorState &State) const;
  /// Forgets what an opaque call may change.
  void forgetOpaqueEffects(const CallExpr &Call, TensorState &State) const;
  bool isTracked(const ValueDecl *D) const;
  template <typename T>
  Sourced<T> throughCall(const Sourced<T> &InCallee,
                         const CallExpr &Call) const;

  const Decl &Function;
  ASTContext &Ctx;
  const TorchApiOptions &Opts;
  ProgramModel *Program;
  NoGradRegions NoGrad;
  /// Variables whose address escapes or that a lambda captures by
  /// reference: their value may change behind the analysis' back.
  llvm::DenseSet<const ValueDecl *> Escaped;
  /// Tensor variables on which backward() is called, with the first such
  /// call, for variables assigned once: LibTorch throws unless they are on
  /// an autograd graph, so their value is.
  llvm::DenseMap<const ValueDecl *, const CallExpr *> BackwardReceivers;
  /// Pointers that cudaHostAlloc / cudaMallocHost fill: page-locked memory.
  llvm::DenseSet<const ValueDecl *> PinnedHostPointers;

  /// Whether the host memory \p Data points to (from_blob's first argument)
  /// is page-locked: a std::vector's data(), a local array, `new[]` or
  /// malloc are pageable, cudaHostAlloc'd memory is pinned.
  Pinning userMemoryPinning(const Expr *Data) const;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_ANALYSIS_TENSORMODEL_H
