//===--- TorchApi.h - torch-tidy --------------------------------*- C++ -*-===//
//
// Recognises the LibTorch calls that the flow analysis models: factories,
// conversions, module calls, host reads and synchronisations.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_API_TORCHAPI_H
#define TORCH_TIDY_API_TORCHAPI_H

#include "clang/AST/Expr.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/StmtCXX.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include <optional>
#include <string>
#include <vector>

namespace clang::tidy::torch {

/// Project-specific additions, from each check's CheckOptions.
struct TorchApiOptions {
  /// Fully qualified functions that synchronise the device.
  std::vector<std::string> ExtraSyncFunctions;
  /// Fully qualified factories whose last TensorOptions/Device argument
  /// places the result, like torch::randn.
  std::vector<std::string> ExtraFactories;
  /// Fully qualified functions that return pinned host tensors.
  std::vector<std::string> ExtraPinnedAllocators;
  /// Functions that count as a backward pass / an optimizer step; with
  /// `::` compared with the qualified name, without with the plain name.
  std::vector<std::string> ExtraBackwardFunctions;
  std::vector<std::string> ExtraStepFunctions;
  /// The project's wrappers around torch::cuda::is_available(): false
  /// without CUDA.
  std::vector<std::string> GuardFunctions;
  /// Functions that pick a device themselves and fall back to the CPU.
  std::vector<std::string> DeviceSelectorFunctions;
  /// Functions that return the number of CUDA devices.
  std::vector<std::string> ExtraDeviceCountFunctions;
  /// RAII types that turn autograd off for their scope.
  std::vector<std::string> GuardTypes;
  /// Functions that add a tensor to a container the way push_back does.
  std::vector<std::string> AccumulatingFunctions;
  /// Functions that empty the CUDA caching allocator's cache.
  std::vector<std::string> ExtraEmptyCacheFunctions;
  /// The project's evaluation functions: every forward in them evaluates.
  std::vector<std::string> EvaluationFunctions;
  /// The project's own gradient resets (a zero-grad helper).
  std::vector<std::string> ZeroGradFunctions;
  /// Tensor methods that return a converted copy, like `to` and `cuda`.
  std::vector<std::string> ExtraConversionMethods;
  /// RAII types that switch autocast on for their scope (CUDA, float16 by
  /// default) and restore it when they end.
  std::vector<std::string> AutocastGuardTypes;
  /// Substrings, lower case, of the string literals by which a generic
  /// handler (`c10::Error`, `std::exception`) shows it tests for an
  /// out-of-memory error.
  std::vector<std::string> OutOfMemoryMessages = {"out of memory",
                                                  "outofmemory"};

  /// How many loops around a statement, innermost first, are searched for
  /// the training loop that repeats it.
  unsigned MaxLoopDepth = 1;

  /// A stable text of every list, for keys and digests.
  std::string key() const;
};

/// A call that empties the CUDA caching allocator's cache.
bool isEmptyCacheCall(const CallExpr &Call, const TorchApiOptions &Opts);

/// Whether \p Record is the class \p QualifiedName or derives from it.
bool isOrDerivesFrom(const CXXRecordDecl *Record, llvm::StringRef QualifiedName);

/// A handler that catches `c10::OutOfMemoryError` (or a class derived from
/// it).
bool catchesOutOfMemoryError(const CXXCatchStmt &Catch);
/// That, or a `c10::Error` / `std::exception` handler whose string literals
/// mention one of the out-of-memory messages.
bool isOutOfMemoryHandler(const CXXCatchStmt &Catch,
                          const TorchApiOptions &Opts);

/// LibTorch, the standard library, and the C library: code that never runs
/// a user's backward pass, moves a user's module or reads a tensor on the
/// host behind the analysis' back.
bool isLibraryFunction(const FunctionDecl &FD);

/// `torch::` / `at::` factories that make a new tensor on the device of
/// their options (CPU without one).
bool isTensorFactory(const FunctionDecl &FD, const TorchApiOptions &Opts);
/// A tensor method that returns a converted copy and leaves its receiver
/// unchanged (`to`, `cuda`, `contiguous`, ...).
bool isTensorConversionMethod(llvm::StringRef Name, const TorchApiOptions &Opts);
/// `*_like` factories, which keep their first argument's device.
bool isLikeFactory(const FunctionDecl &FD);
/// `torch::tensor(scalar)` and `torch::scalar_tensor`: 0-dim results.
bool isScalarFactoryCall(const CallExpr &Call);
/// Multi-tensor functions whose tensor arguments must share a device:
/// cat, stack, matmul, mm, bmm, losses, where, ...
bool isMultiTensorFunction(const FunctionDecl &FD);
/// Loss functions (`torch::nn::functional::*_loss`, `torch::mse_loss`, ...).
bool isLossFunction(const FunctionDecl &FD);
/// A call that blocks the host until the device is idle.
bool isSynchronizeCall(const CallExpr &Call, const TorchApiOptions &Opts);
bool isPinnedAllocator(const FunctionDecl &FD, const TorchApiOptions &Opts);

/// The name of an at::Tensor method called by \p Call, or "" when \p Call is
/// no such call.
llvm::StringRef tensorMethodName(const CallExpr &Call);
/// The object expression of a member call (`x` in `x.to(d)`), without
/// implicit casts.
const Expr *memberCallObject(const CallExpr &Call);

/// A class that is a torch::nn::Module, a ModuleHolder, a pointer, or a
/// std::shared_ptr or std::unique_ptr to a Module.
bool isModuleHandleType(QualType T);
/// The module class a handle type holds (`FooImpl` for `Foo`,
/// `std::shared_ptr<FooImpl>`, `ModuleHolder<FooImpl>`).
const CXXRecordDecl *moduleClassOfHandle(QualType T);
/// Whether handles of types \p A and \p B may name one module: not when
/// both hold module classes of which neither derives from the other.
bool mayNameSameModule(QualType A, QualType B);
/// Whether a LibTorch layer (`torch::nn::DropoutImpl`, ...) behaves
/// differently in training and evaluation mode: Yes for the dropouts, the
/// batch norms and the transformers (dropout 0.1 by default); Unknown where
/// its options decide (InstanceNorm's running stats, a recurrent layer's or
/// attention's dropout); No for the other `torch::nn` layers. Unknown for a
/// class outside `torch::nn`.
enum class ModeDependence { Unknown, Yes, No };
ModeDependence layerModeDependence(const CXXRecordDecl &Layer);

/// A module handle whose copies share one module: a holder (`Net`), a
/// `std::shared_ptr` of a module, a TorchScript module.
bool isSharedModuleHandleType(QualType T);
/// `torch::nn::Module` itself, through a reference, a pointer or a
/// `std::shared_ptr`: a module of any class (`net->children()`' layers).
bool isErasedModuleType(QualType T);

/// How a call of a method of module handle \p Handle is written: `->` for
/// a holder or a pointer (`net->eval()`), `.` for a module object.
llvm::StringRef moduleMemberAccess(QualType Handle);

/// A LibTorch value whose facts describe it whole, not part by part: a
/// tensor, a module handle, a device, tensor options, a TorchScript value.
bool isTorchValueType(QualType T);
/// The dtype enum, `c10::ScalarType` (`at::kHalf`, `torch::kFloat16`).
bool isDtypeType(QualType T);
/// `torch::data::Example`.
bool isDataExampleType(QualType T);
/// Tensor methods that return a view of their receiver's storage (`slice`,
/// `narrow`, `view`, `transpose`, ...): the memory stays where it was.
bool isViewMethod(llvm::StringRef Method);
/// Tensor functions and methods whose result has no autograd graph
/// whatever their inputs: indices, booleans and counts (`argmax`, `eq`,
/// `isnan`, `nonzero`, ...).
bool returnsNoGraph(llvm::StringRef Name);
/// Element-wise tensor functions of one tensor (`log`, `exp`, `relu`,
/// `sigmoid`, ...): the result has the operand's shape.
bool isElementwiseFunction(llvm::StringRef Name);
/// Element-wise operations of two or more tensors (a function, or a tensor
/// method on its object; in-place spellings without the `_`): `add`, `eq`,
/// `masked_fill`, `where`, ...
bool isElementwiseOfTwo(llvm::StringRef Name);
/// A point-wise operation, of one tensor or of several that broadcast: the
/// result has the rank of its highest-rank operand.
bool isPointwise(llvm::StringRef Name);
/// LibTorch functions whose result has at least the rank of their first
/// operand: convolutions, pooling, normalisation, interpolation, padding.
bool keepsRankFunction(llvm::StringRef Name);
/// The least rank of what a LibTorch function that joins tensors returns
/// from operands of rank \p Operands: one more for `stack`, at least one
/// for `cat` and its spellings (never a 0-dim tensor); nullopt for others.
std::optional<unsigned> joinedRank(llvm::StringRef Name, unsigned Operands);
/// Tensor functions and methods that return a (values, indices) tuple
/// (`max(dim)`, `topk`, `sort`, ...): the indices carry no graph.
bool returnsValuesAndIndices(llvm::StringRef Name);

/// `torch::data::Iterator<Batch>`: a data loader's iterator.
bool isDataIteratorType(QualType T);
/// `c10::GradMode` guards that turn autograd off for their scope.
bool isNoGradGuardType(QualType T);

/// A call of a module: `net->forward(x)`, `net(x)`, `net.forward(x)`.
struct ModuleCall {
  /// The expression that denotes the module handle (`net`).
  const Expr *Module = nullptr;
  /// A type-erased `AnyModule`: its module's facts (device, mode, layers)
  /// are not followed.
  bool TypeErased = false;
  /// The tensors passed to forward.
  llvm::SmallVector<const Expr *, 2> Inputs;
};
/// Recognises \p E as a call of a module's forward; false otherwise.
bool matchModuleCall(const Expr &E, ModuleCall &Out);
/// A call of a method that a project's module class declares itself
/// (`model->decode(z)`), on a module other than `*this`: the module, with
/// the call's arguments as inputs. Whether it runs the module's layers is
/// the method's summary's to say.
bool matchOwnModuleMethodCall(const CallExpr &Call, ModuleCall &Out);

/// An operation whose tensor operands must all be on one device.
struct DeviceOperation {
  /// How messages name it: "operator '+'", "'at::cat'"; empty for a module
  /// call.
  std::string What;
  /// The module first for a module call, then the tensors.
  llvm::SmallVector<const Expr *, 4> Operands;
  bool IsModuleCall = false;
  /// Element-wise: a 0-dim CPU operand is allowed next to CUDA ones.
  bool Elementwise = false;
  /// In place (`a += b`): the first operand is the output, which takes no
  /// 0-dim CPU exception.
  bool InPlace = false;
};
/// Recognises a module call, a tensor arithmetic operator or a multi-tensor
/// function.
bool matchDeviceOperation(const Stmt &S, DeviceOperation &Out);
/// The tensor operands of a call of a LibTorch function: its tensor
/// arguments, the tensors of its braced lists and its containers (each
/// standing for its elements), less the ones it reads on the host
/// (ctc_loss's lengths).
void functionOperands(const CallExpr &Call,
                      llvm::SmallVectorImpl<const Expr *> &Out);

/// A tensor copy that may be non-blocking: `src.to(...)`, `src.cuda(...)`,
/// `dst.copy_(src, ...)`.
struct TensorCopy {
  const CallExpr *Call = nullptr;
  const Expr *Source = nullptr;
  /// The expression whose device is the destination (the call itself for
  /// `to` and `cuda`).
  const Expr *Destination = nullptr;
};
bool matchTensorCopy(const Stmt &S, TensorCopy &Out);

/// `module->Method(...)` / `module.Method(...)` on a torch::nn::Module: the
/// module handle, or null.
const Expr *moduleMethodCallReceiver(const CallExpr &Call,
                                     llvm::StringRef Method);
/// `register_module(name, m)`, `register_parameter(name, t)`,
/// `register_buffer(name, t)` of a torch::nn::Module: the value registered
/// (which the call returns), or null.
const Expr *registeredValue(const CallExpr &Call);
/// A free function of LibTorch (torch::, at::, c10::).
bool isTorchFunction(const FunctionDecl &FD);
/// Whether \p D is declared in LibTorch's namespaces (torch, at, c10).
bool isTorchNamespaceDecl(const Decl &D);

/// `module->to(...)` / `module.to(...)`: the module handle, or null.
const Expr *moduleToReceiver(const CallExpr &Call);

/// `torch::load(module, path[, device])`: the module loaded into, or null;
/// \p Device is set to the device argument when there is one (the 2.x
/// headers forward it through a parameter pack).
const Expr *moduleLoadedBy(const CallExpr &Call, const Expr *&Device);

/// What a TorchScript value's accessor reads its tensors from:
/// `v.toTensor()`, `v.toTuple()`, `tuple->elements()`, `p->`, and
/// `elements()[i]` of a temporary list name the value they are called on.
/// Null for anything else (`v.toInt()`, `v.isTensor()`).
const Expr *scriptValueSource(const Expr &E);

/// `torch::jit::load(path[, device])`: a TorchScript module read from a
/// file. \p Device is set to the device argument, or null when the module
/// keeps the devices it was saved from.
bool isScriptModuleLoad(const CallExpr &Call, const Expr *&Device);

/// The argument bound to a parameter named \p Name, or null (also when a
/// default argument is used).
const Expr *argumentForParameter(const CallExpr &Call, llvm::StringRef Name);

/// Strips implicit casts, temporaries, parentheses and converting
/// constructors (Device -> TensorOptions, DeviceType -> Device, ...).
const Expr *stripConversions(const Expr *E);
/// The tensor an argument passes: itself, or the tensor converted to an
/// optional one (`c10::optional<Tensor>` parameters: a window, a weight);
/// null for anything else.
const Expr *tensorArgument(const Expr *Arg);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_API_TORCHAPI_H
