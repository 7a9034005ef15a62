//===--- FlowModel.h - torch-tidy -------------------------------*- C++ -*-===//
//
// The transfer functions of the one dataflow engine: where an expression
// lives (locationOf), what value it computes (evaluate), how a statement
// changes the state (transfer), and what a branch proves (refineOnBranch).
// Calls of user functions go through their summaries (ProgramModel).
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_FLOWMODEL_H
#define TORCH_TIDY_MODEL_FLOWMODEL_H

#include "ResolvedCall.h"
#include "State.h"
#include "api/TorchApi.h"
#include "clang/AST/ASTContext.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/Stmt.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

namespace clang::tidy::torch {

/// Where the batch of `batch.data` / `batch.target` comes from a
/// torch::data loader (which collates into pageable memory on the CPU):
/// the batch variable, or the iterator dereferenced; invalid otherwise.
SourceLocation loaderBatchOrigin(const Expr &E, ASTContext &Ctx);

class ProgramModel;
struct FunctionSummary;
enum class TrainingCall; // ProgramModel.h

/// The variables a lambda's call operator captures, or none.
llvm::SmallVector<const VarDecl *, 4> capturedVariables(const FunctionDecl &F);
/// Whether \p L is a variable of another function than \p Function, which
/// it does not capture: a lambda that \p Function runs captured it where it
/// was written. It travels as an entry value: that function knows it.
bool isForeignVariable(const Location &L, const FunctionDecl *Function);
/// A value whose known number the model tracks: a bool, an integer, an
/// enumeration the program declares, or LibTorch's dtype (not its device,
/// which is a device fact).
bool isScalarType(QualType T);
/// Whether \p L is, whole, a variable that \p Function uses but another
/// function declares (one it captures, or a foreign variable) or a global:
/// it outlives every call of \p Function.
bool outlivesFunction(const Location &L, const FunctionDecl *Function);
/// Whether \p Loc lies in the body of the function that declares the
/// variable \p L names (which may reset it there); true when unsure.
bool withinDeclaringFunction(const Location &L, SourceLocation Loc);
/// The element variable of a range-for that \p E names, itself or a part
/// of it (`hook`, `kv.second`, a structured binding's `hook`); null
/// otherwise.
const VarDecl *rangeElementNamed(const Expr &E);
/// Whether \p E tests a counter: an integer remainder (`++i % N`), an
/// increment, or a comparison of an integer variable with another integer
/// (`micro_ == accum_`, `step < warmup`); not a call's result or a float.
bool testsCounter(const Expr *E, unsigned Depth = 0);
/// The container a range-for's element variable walks; null otherwise.
const Expr *rangeOfElement(const VarDecl &Element);

/// An addition to storage that outlives the statement.
struct Accumulation {
  enum Kind : unsigned { Add = 0, Append = 1, Store = 2 };
  /// The accumulator (a container or a holder for Append/Store) and what
  /// is added to it.
  const Expr *Into = nullptr;
  const Expr *Value = nullptr;
  Kind How = Add;
};

/// A host-device synchronisation: a blocking read of a tensor back to the
/// host (`.item()`, `.cpu()`, a blocking `.to(<CPU>)`), streaming a tensor,
/// or a synchronize call (no tensor).
struct HostSync {
  enum Kind : unsigned { Read = 0, Print = 1, Synchronize = 2 };
  const Expr *Tensor = nullptr;
  Kind How = Read;
};

/// Whether \p L lies in an element of a container of several (not in the
/// object an owning pointer or an optional holds, which the same selector
/// names).
bool inContainerElement(const Location &L);

class FlowModel {
public:
  /// The model of the code of \p Owner: a function's body, or a global's
  /// initialiser.
  FlowModel(const Decl *Owner, ASTContext &Ctx, ProgramModel &Program);

  //===--- Values ----------------------------------------------------------===//

  /// The location \p E denotes, when it is a tracked one.
  Location locationOf(const Expr *E) const;
  /// The element an iterator variable (`it`, or std::array's pointer)
  /// stands at: the elements of the container it walks.
  Location iteratedElement(const Expr *Iterator) const;
  /// The type of what \p L names; null where a step is not followed (the
  /// object `*this` is, a tuple's element).
  QualType locationType(const Location &L) const;
  /// testsCounter, or a call (negated or not) of a function whose summary
  /// tests one (`if (accum_.boundary())`).
  bool testsCounterAt(const Expr *Cond, const State &S) const;
  /// The elements a library algorithm (`std::for_each`, `std::transform`)
  /// hands \p P, a parameter of a lambda that \p Call passes it: those of
  /// the one range among its arguments whose elements have P's type.
  Location algorithmElement(const ParmVarDecl &P, const Expr &Call) const;
  /// The object a pointer expression points to (`&x`, `this`, a pointer
  /// parameter or local that the function never reseats), as locationOf
  /// names it; a pointer parameter names its pointee like a reference.
  Location pointeeLocation(const Expr *Pointer) const;
  /// \p L with a member that names a caller's object (MemberBindings.cpp)
  /// replaced by that object when this function built the object; invalid
  /// for a reference member of an object built out of sight, which names
  /// nothing the analysis can follow.
  Location throughBindings(const Location &L) const;
  /// Forgets what \p Object's binding members name (a call that may do
  /// anything to the object).
  void forgetBoundObjects(const Location &Object, State &St) const;
  /// The binding members of the local object \p Object that name another
  /// location, each with it.
  llvm::SmallVector<std::pair<Location, Location>, 2>
  boundMembers(const Location &Object) const;
  /// The caller's storage that a call returns (a getter of a member, a
  /// function returning its reference parameter), when its summary says
  /// which; null otherwise.
  Location returnedStorageAt(const CallExpr &Call) const;
  /// The facts of the value \p E computes, in state \p S.
  ValueFacts evaluate(const Expr *E, const State &S) const;
  /// An operand of a tensor operation: a tensor's facts, or a container's,
  /// whose one location stands for all its elements; nullopt for others.
  std::optional<ValueFacts> evaluateOperand(const Expr &E,
                                            const State &S) const;
  /// The device a device-like expression (Device, DeviceType, string,
  /// TensorOptions) names; unknown when it names none.
  Sourced<DeviceValue> evaluateDeviceSpec(const Expr *E, const State &S) const;
  /// The value of a bool expression, when known.
  std::optional<bool> evaluateBool(const Expr *E, const State &S) const;
  /// What is known of a bool or integer expression.
  ScalarFacts evaluateScalar(const Expr *E, const State &S) const;

  //===--- Statements ------------------------------------------------------===//

  /// Writes the value \p Value returns into Location::returned() (part by
  /// part for tuples, containers and aggregates), for summaries.
  void assignReturned(const Expr &Value, QualType Type, State &St) const {
    assign(Location::returned(), Type, &Value, Value.getExprLoc(), St);
  }
  /// Applies the effect of \p S (one node; its children were applied
  /// before) to \p St.
  void transfer(const Stmt &S, State &St) const;
  /// `std::tie(a, b) = value`: each tied variable takes its element; false
  /// for any other assignment.
  bool assignTied(const CXXOperatorCallExpr &Op, State &St) const;
  /// The end of \p Var's lifetime (an RAII guard restores what it saved).
  /// What destroying the object an owning pointer or an optional of type
  /// \p Owner holds does (`p.reset()`, the owner's scope ending).
  void destroyOwnedObject(QualType Owner, State &St) const;
  /// A range-for of ElementwiseLoopRanges: its range variable keeps what
  /// the elements held before the first iteration (rememberUnvisited), and
  /// each iteration starts with them (enterRangeFor).
  void rememberUnvisited(const VarDecl &Range, State &St) const;
  void enterRangeFor(const CXXForRangeStmt &Loop, State &St) const;
  void transferDestructor(const VarDecl &Var, State &St) const;
  /// A constructor's member initialiser.
  void initializeMember(const CXXCtorInitializer &Init, State &St) const;
  /// Narrows \p St on the edge where \p Cond evaluated to \p Taken.
  void refineOnBranch(const Expr *Cond, bool Taken, State &St) const;
  /// What \p Cond being \p Taken says of the values it tests.
  void refineValues(const Expr *Cond, bool Taken, State &St) const;

  //===--- Calls -----------------------------------------------------------===//

  /// The function \p Call runs and the argument for each of its parameters.
  ResolvedCall resolve(const Expr &Call) const;
  /// The same, in state \p S: a call of a callable (a std::function, a
  /// function pointer) that holds one known function runs that function.
  ResolvedCall resolve(const Expr &Call, const State &S) const;
  /// \p Call of a callable, resolved as a call of \p Target, one of the
  /// functions it may hold.
  ResolvedCall resolveAs(const CallExpr &Call, const FunctionDecl &Target,
                         const State &S) const;
  /// The user function a call of a callable runs in \p S, when it holds
  /// exactly one; null for a direct call.
  const FunctionDecl *callableTarget(const CallExpr &Call,
                                     const State &S) const;
  /// The user functions a call of a callable runs in \p S: the one it holds,
  /// or, for the element of a range-for over a container of callables, each
  /// one that some path stored in it; empty for a direct call.
  llvm::SmallVector<const FunctionDecl *, 1>
  possibleCallableTargets(const CallExpr &Call, const State &S) const;
  /// ProgramModel::callTrains and mayTrain in \p S: a call of a callable
  /// that holds known functions trains when each of them does, and may
  /// train when one of them may.
  bool callTrains(const CallExpr &Call, TrainingCall What,
                  const State &S) const;
  bool mayTrain(const CallExpr &Call, const State &S) const;
  /// \p Call runs a module: its forward, or a method of its class whose
  /// summary runs the module's layers (`model->decode(z)`).
  bool runsModule(const CallExpr &Call, ModuleCall &Out) const;
  /// \p Run runs as part of the module whose method this is: anything in
  /// its forward, and elsewhere `*this` or one of its layers. It runs in
  /// the owner's mode where the owner's method is called: judged there.
  bool isOwnLayer(const ModuleCall &Run) const;
  /// Writes the value of \p Init into \p L (a declaration or assignment,
  /// a global's initialiser), part by part for tuples, pairs and aggregates.
  void assign(const Location &L, QualType Type, const Expr *Init,
              SourceLocation Loc, State &St) const;
  /// The summary of the function \p Call runs in \p S; null when unknown.
  const FunctionSummary *summaryAt(const Expr &Call, const State &S) const;
  /// The callee's summary for the values \p S knows of its deciding inputs
  /// (ProgramModel::decidingInputs) at \p Call; null when it knows none.
  const FunctionSummary *summaryForKnownInputs(const ResolvedCall &Call,
                                               const State &S) const;
  /// Where, in the caller at \p Call, the callee's entry location \p InCallee
  /// lives: the argument for a parameter, the object's member for a member
  /// of `*this`, the same global.
  Location callerLocation(const Location &InCallee,
                          const ResolvedCall &Call) const;
  /// callerLocation, or, for a part of a parameter whose argument is a
  /// temporary, that temporary: built into \p Scratch, a copy of \p St,
  /// which the returned location then names.
  Location callerStorage(const Location &InCallee, const ResolvedCall &Call,
                         const State &St, std::optional<State> &Scratch) const;
  /// The facts that a fact of the callee, written in its entry terms, has in
  /// the caller at \p Call, in state \p S (the state before the call); the
  /// facts established in the callee remember the call in their path.
  /// \p Rewritten: the caller's storage the call writes; a device named by
  /// a member inside it is not what \p S says the member held before.
  ValueFacts instantiate(const ValueFacts &InCallee, const ResolvedCall &Call,
                         const State &S,
                         llvm::ArrayRef<Location> Rewritten = {}) const;
  /// \p Conflict, when given, is set where the callee combined two entry
  /// values that the caller's facts prove apart (the value is then the
  /// accelerator one's, as combineOperands decides).
  Sourced<DeviceValue> instantiate(const Sourced<DeviceValue> &InCallee,
                                   const ResolvedCall &Call, const State &S,
                                   llvm::ArrayRef<Location> Rewritten = {},
                                   bool *Conflict = nullptr) const;
  /// A graph of two entry values (InCallee.AlsoEntry): a graph when either
  /// caller's value has one, none when neither has.
  Sourced<GraphState> instantiateEitherGraph(const Sourced<GraphState> &InCallee,
                                             const ResolvedCall &Call,
                                             const State &S) const;
  /// \p Returned, a value (or part of one) a call hands back, keeps the
  /// graphs of the tensors the caller passed in, as far as the model knows:
  /// a loss helper's sum keeps its arguments' graphs.
  void keepArgumentGraphs(const ResolvedCall &Call, const State &S,
                          ValueFacts &Returned) const;
  /// A module's class facts (parameters, mode-dependent layers) where
  /// \p Module does not know them: they are its class's wherever it is held.
  void withClassFacts(ValueFacts &Module, QualType ModuleType) const;
  /// The caller's facts of the callee's entry value \p Entry.
  ValueFacts entryValueAt(const ValueDecl &Entry, const ResolvedCall &Call,
                          const State &S) const;

  //===--- Queries ---------------------------------------------------------===//

  /// Whether a tensor read at \p Call completes earlier non-blocking
  /// copies: a blocking read of a tensor that may be on CUDA waits for its
  /// stream.
  bool isBlockingDeviceRead(const CallExpr &Call, const State &S) const;
  /// Whether \p Call makes the host wait for the device, whatever the
  /// tensor's device (HostReads.cpp).
  bool matchHostSync(const CallExpr &Call, const State &S, HostSync &Out) const;
  /// Every operand \p S reads on the host: `.item()`, `.data_ptr()`,
  /// `accessor<>()`, streaming and comparisons, and tensors passed to a
  /// function outside LibTorch and the standard library; a view read
  /// (`h[i]`) reads the tensor it views.
  static void hostReadOperands(const Stmt &S,
                               llvm::SmallVectorImpl<const Expr *> &Out);
  static void collectHostReadOperands(const Stmt &S,
                                      llvm::SmallVectorImpl<const Expr *> &Out);
  /// The same, in state \p St: a user function that may synchronise is not
  /// taken to read the tensors handed to it (it may wait for them first).
  void hostReadsAt(const Stmt &S, const State &St,
                   llvm::SmallVectorImpl<const Expr *> &Out) const;

  //===--- Out-of-memory handlers (OomRetry.cpp) --------------------------===//

  /// The path enters \p Catch, a handler of \p Try: from here on, an
  /// out-of-memory handler records what the path writes.
  void enterHandler(const CXXCatchStmt &Catch, const CXXTryStmt &Try,
                    State &St) const;
  /// The out-of-memory handler, entered on some path to \p Call and with
  /// its emptyCache() run, whose failed work \p Call runs again with none of
  /// that work's inputs written since; null when there is none.
  const OomRecovery *recoveryRetriedBy(const CallExpr &Call,
                                       const State &St) const;
  /// The storage \p E names: its tracked location, or the variable, `*this`
  /// or field it is written as.
  Location storageOf(const Expr *E) const;

  /// The function analysed; null for a global's initialiser.
  const FunctionDecl *function() const { return Function; }
  /// Whether \p E is written outside every path of the function: in a
  /// member's default initialiser or a global's initialiser (a constructor
  /// runs it, but it belongs to no one path).
  bool isOutsidePaths(const Expr &E) const;
  /// `acc += v`, `acc = acc + v`, `acc.add_(v)` on a tensor; an insert into
  /// a container; a call of a project's accumulating function.
  bool matchAccumulation(const Stmt &S, Accumulation &Out) const;
  const Decl &owner() const { return *Owner; }
  ProgramModel &program() const { return Program; }
  const TorchApiOptions &options() const;
  /// Whether \p S leaves the function: a return, or a throw or a call
  /// whose summary may throw that no try block of the function catches.
  bool leavesFunction(const Stmt &S) const;
  /// Whether \p S is written in this function's body.
  bool isInBody(const Stmt *S) const;
  /// The function switches autocast off, or back to a saved state,
  /// somewhere: it means to close the regions it opens.
  bool closesAutocast() const { return ClosesAutocast; }
  /// Some path switches autocast on, itself or through a call (found as
  /// the analysis meets it).
  bool opensAutocast() const { return OpensAutocast; }
  ASTContext &context() const { return Ctx; }

  /// The facts of a module built here (`Net net;`, `Net(4)`,
  /// `std::make_shared<NetImpl>()`): parameters on the CPU unless its
  /// constructor moves it, in training mode.
  /// The function's own bool, integer or enum parameter that \p E names,
  /// when the body never writes it.
  const ParmVarDecl *unwrittenParameter(const Expr *E) const;
  const ParmVarDecl *unwrittenBoolParameter(const Expr *E) const;
  /// \p E as a test of one of the function's parameters, or none.
  ParameterTest parameterTest(const Expr *E) const;
  /// The truth of the callee's \p Test at \p Call: known from the
  /// argument, or (in \p Chained) a test of the caller's own parameter.
  std::optional<bool> decideParameterTest(const ParameterTest &Test,
                                          const ResolvedCall &Call,
                                          const State &S,
                                          ParameterTest &Chained) const;
  /// Whether one of \p Args is a module with a Dropout or BatchNorm layer.
  bool anyModeLayer(llvm::ArrayRef<const Expr *> Args) const;
  ValueFacts newModuleFacts(QualType ModuleType, SourceLocation Loc) const;

  /// Element `Index` of the tuple of tensors that a LibTorch function or
  /// tensor method returns (`t.topk(k)`, `torch::max(t, 1)`), or any
  /// element of its vector of tensors (`t.chunk(n)`, `torch::meshgrid`);
  /// none when `E` is no such call.
  std::optional<ValueFacts> tensorTupleElement(const Expr &E, unsigned Index,
                                               const State &S) const;

private:
  ValueFacts evaluateCall(const CallExpr &Call, const State &S) const;
  std::optional<ValueFacts> tupleGetOfTensorCall(const CallExpr &Call,
                                                 const State &S) const;
  ValueFacts evaluateTensorMethod(const CallExpr &Call, llvm::StringRef Name,
                                  const State &S) const;
  ValueFacts evaluateConversion(const CallExpr &Call, const ValueFacts &Source,
                                const State &S) const;
  ValueFacts evaluateFactory(const CallExpr &Call, const State &S) const;
  ValueFacts evaluateOperator(const Expr &E, llvm::ArrayRef<const Expr *> Ops,
                              const State &S) const;
  /// \p F, a value just computed, as a loss: a mean loss computed in a
  /// float16 autocast region remembers the region.
  void setMeanLoss(ValueFacts &F, Tri Mean, const State &S) const;
  /// A mean loss a callee computed in the region this path is in.
  void stampAutocast(ValueFacts &F, const State &S) const;
  /// A part of a call's temporary result (`net->forward(x).first`,
  /// `std::get<0>(f(x))`): what the callee's summary returns in that part;
  /// unknown when \p E is no such part.
  ValueFacts evaluatePartOfResult(const Expr *E, const State &S) const;
  /// What an op that runs computes from operands with these facts.
  ValueFacts combineOperands(const Expr &E, llvm::ArrayRef<ValueFacts> Ops,
                             const State &S) const;
  ValueFacts evaluateLocation(const Expr &E, const Location &L,
                              const State &S) const;
  /// What \p L holds, for a change in place: a part of this function's
  /// parameter that nothing wrote yet keeps the caller's facts
  /// (ValueFacts::KeepsCallerFacts).
  ValueFacts heldForUpdate(const Location &L, const State &St) const;
  /// What \p L, a registered parameter, buffer or submodule, takes from
  /// the module that holds it: its device, and a submodule's mode, when
  /// they are known or, in a summary, the callers' module's (entry tags).
  std::optional<ValueFacts> enclosingModuleFacts(const Location &L,
                                                 const State &S) const;
  ValueFacts evaluateModuleCall(const Expr &E, const ModuleCall &MC,
                                const State &S) const;
  ValueFacts evaluateOptions(const Expr *E, const State &S) const;
  ValueFacts evaluateConstruction(const CXXConstructExpr &E,
                                  const State &S) const;
  /// `d == torch::kCUDA`, `t.device().type() != kCUDA`: what comparing a
  /// device the program holds with CUDA proves; nullopt when \p L and \p R
  /// are not such a comparison.
  std::optional<ScalarFacts> deviceComparison(bool Equal, const Expr *L,
                                              const Expr *R) const;
  ScalarFacts evaluateComparison(const Expr &E, BinaryOperatorKind Op,
                                 const Expr *L, const Expr *R,
                                 const State &S) const;

  void assignValue(const Location &L, QualType Type, const Expr *Init,
                   SourceLocation Loc, State &St) const;
  /// An assignment `Target = Value`: a strong update, except for one element
  /// of a container picked by index or key, which joins into the others.
  void assignTo(const Expr &Target, const Expr *Value, SourceLocation Loc,
                State &St) const;
  /// Writes what a user function's summary says it returns, part by part,
  /// into \p L when \p Value is a call of one; false otherwise.
  bool assignCallResult(const Location &L, const Expr *Value,
                        State &St) const;
  void transferCall(const CallExpr &Call, State &St) const;
  /// A standard function that runs the lambdas it is handed (std::visit,
  /// std::for_each): what they do, as their summaries say. False when it
  /// runs none or one is not known.
  bool runHandedLambdas(const CallExpr &Call, State &St) const;
  /// The caller's storage a by-value result copies, when the callee returns
  /// a part of a reference parameter (`return batch.weight;`): what the
  /// caller holds there fills what the callee did not establish.
  Location returnedArgumentPart(const FunctionSummary &Summary,
                                const ResolvedCall &Call) const;
  /// `std::swap(a, b)`: each holds what the other held.
  void exchange(const Expr *A, const Expr *B, State &St) const;
  /// \p Owner (an owning pointer) is given an object that \p Init builds
  /// with a constructor whose summary is known: that summary, on it.
  bool constructOwned(const Location &Owner, const Expr *Init,
                      State &St) const;
  /// What a call does to the gradients (path facts): resets, optimizer
  /// steps, backward passes and rescalings, its own or its summary's.
  void transferGradientState(const CallExpr &Call,
                             const FunctionSummary *Summary,
                             State &St) const;
  /// What a callee's summary does to the gradients, run at \p Call (a
  /// call, or the construction whose object's destructor runs).
  static void applyGradientSummary(const Stmt &Call,
                                   const FunctionSummary &Summary,
                                   PathFacts &Path);
  /// What a call does to autocast (a path fact): switches it on or off,
  /// sets CUDA's dtype, or leaves it as its summary says.
  void transferAutocast(const CallExpr &Call, const FunctionSummary *Summary,
                        State &St) const;
  /// What destroying an object of \p RD does to autocast: its destructor's
  /// summary (a guard restores what it saved), or its members'.
  void applyAutocastDestruction(const CXXRecordDecl &RD, State &St) const;
  /// What the compiler's constructor (destructor, with \p Destroy) of \p RD
  /// does to autocast through its members' (a guard member); \p At is the
  /// construction, for notes.
  void applyMemberAutocast(const CXXRecordDecl &RD, const Expr *At,
                           bool Destroy, State &St) const;
  /// A branch on the bool \p Cond (stored at \p L): it holds on the path,
  /// or it refutes the condition under which autocast was switched on.
  void refineAutocast(const Expr *Cond, const Location &L, bool Taken,
                      State &St) const;
  /// A call's (or a construction's, a destruction's) effect on autocast,
  /// as its summary says.
  void applyAutocastSummary(const Expr &Call, const FunctionSummary *Summary,
                            State &St) const;
  /// The graphs a call that runs a backward pass reaches, on the path.
  void recordBackpropagation(const CallExpr &Call,
                             const FunctionSummary *Summary, State &St) const;
  /// Whether \p E reads the location \p L.
  bool readsLocation(const Expr *E, const Location &L) const;
  /// What an update of \p Into adds to it: `v` in `c + v`, `0.1 * v` in
  /// `0.9 * c + 0.1 * v`; null when \p Update is not such a sum.
  const Expr *addedTerm(const Expr *Update, const Location &Into) const;
  /// A tensor term of the arithmetic \p E that does not read \p Into: `v`
  /// in `0.1 * (v - c)`; null when every term reads it.
  const Expr *freshTerm(const Expr *E, const Location &Into) const;
  void transferConstruction(const CXXConstructExpr &E, const Location &Object,
                            State &St) const;
  /// A value a callee returns or stores as it received it, the parameter
  /// \p Exit names: the caller's argument's parts, copied under \p Here.
  void copyArgumentParts(const ValueFacts &Exit, const ResolvedCall &Call,
                         const State &Before, const Location &Here,
                         State &St) const;
  void applySummary(const ResolvedCall &Call, const FunctionSummary &Summary,
                    const Location &Result, State &St) const;
  void forgetOpaqueEffects(const ResolvedCall &Call, State &St) const;
  /// Every module's mode may have changed (PathFacts::ModesClobbered); or,
  /// given \p OfHandle, that of every module a handle of that type may
  /// name.
  void forgetModes(State &St, QualType OfHandle = QualType()) const;
  /// Whether the object \p E builds at \p Object keeps the module of its
  /// argument \p Argument only in members bound to it, if at all.
  bool keepsModulesOnlyBound(const CXXConstructExpr &E,
                             const CXXConstructorDecl &Ctor,
                             const FunctionSummary &Summary,
                             const Location &Object, unsigned Argument) const;
  /// A local object of this function that only its own code can reach: no
  /// lambda captured it by reference and no pointer or reference holds it.
  bool isPrivateObject(const Expr &Object) const;
  /// Code the analysis cannot see ran (a callable of unknown contents): the
  /// steps of every optimizer it may reach may have been reset.
  void unknownCodeMayReset(PathFacts &Path) const;
  void recordCudaSelection(const Expr &Use, State &St) const;
  void appendToContainer(const Location &Elements, const Expr *Value,
                         const Stmt &At, State &St) const;
  /// The parts (fields, tuple elements) of \p Value join those of the
  /// elements at \p Elements; \p WasEmpty: there were none before.
  void joinElementParts(const Location &Elements, const Expr &Value,
                        SourceLocation Loc, bool WasEmpty, State &St) const;
  bool isTracked(const ValueDecl *D) const;
  template <typename T>
  Sourced<T> throughCall(const Sourced<T> &InCallee,
                         const ResolvedCall &Call) const;

  const Decl *Owner;
  const FunctionDecl *Function;
  ASTContext &Ctx;
  ProgramModel &Program;
  /// Variables whose address is kept in a pointer: their value may change
  /// behind the analysis' back.
  llvm::DenseSet<const ValueDecl *> Escaped;
  /// `&member_` of `*this` kept where no alias is tracked: the member's
  /// facts are forgotten there.
  llvm::DenseSet<const UnaryOperator *> EscapingMemberAddresses;
  /// Variables a lambda of the function captures by reference.
  llvm::DenseSet<const ValueDecl *> CapturedByReference;
  /// Tensor variables on which backward() is called, with the first such
  /// call, for variables assigned once: LibTorch throws unless they are on
  /// an autograd graph, so their value is.
  llvm::DenseMap<const ValueDecl *, const CallExpr *> BackwardReceivers;
  /// Pointer variables the function assigns after their initialisation:
  /// they point to more than one object.
  llvm::DenseSet<const ValueDecl *> ReseatedPointers;
  /// Pointers that cudaHostAlloc / cudaMallocHost fill: page-locked memory.
  llvm::DenseSet<const ValueDecl *> PinnedHostPointers;
  /// The range variables of the range-for loops whose body resets
  /// gradients (`for (auto &p : net->parameters()) p.grad().zero_();`):
  /// the loop counts as a reset, as if it ran at least once.
  llvm::DenseSet<const VarDecl *> ResettingLoopRanges;
  /// Range variables of range-for loops whose body calls each element (a
  /// container of hooks): the loop runs what the elements hold.
  llvm::DenseSet<const VarDecl *> CallingLoopRanges;
  /// The range variables of range-fors whose body reaches the container
  /// only through the loop variable: each iteration visits an element no
  /// earlier one wrote (enterRangeFor).
  llvm::DenseSet<const VarDecl *> ElementwiseLoopRanges;
  /// The function switches autocast off (or back) somewhere, itself or
  /// through a call (found as the analysis meets it); the throws its own
  /// try blocks catch.
  mutable bool ClosesAutocast = false, OpensAutocast = false;
  llvm::DenseSet<const Stmt *> CaughtThrows;
  /// The work of each try block an out-of-memory handler was followed from.
  mutable llvm::DenseMap<const CXXTryStmt *,
                         llvm::SmallVector<const CallExpr *, 8>>
      TryWork;
  /// Module handle variables initialised as a copy of another handle and
  /// never assigned: they name the same module.
  llvm::DenseMap<const ValueDecl *, const Expr *> HandleAliases;
  /// Local objects built by a constructor, never assigned, copied or
  /// addressed, and those a local owning pointer holds from
  /// `std::make_unique<T>(args)`: their binding members name what the
  /// construction passed.
  llvm::DenseMap<const VarDecl *, const Expr *> ObjectConstructions;
  /// The object \p L is a part of whose construction ObjectConstructions
  /// knows: a local object, or the object a local owning pointer holds;
  /// and that object's location. \p Depth: the steps of L that name it.
  const VarDecl *constructedObject(const Location &L, unsigned &Depth) const;

  /// Records the writes of \p S, and the emptyCache() it runs, in every
  /// out-of-memory handler the path entered.
  void trackRecoveries(const Stmt &S, State &St) const;
  /// The work \p R's handler saw fail: the try block's calls (computed once
  /// per try), or the call of the callee that failed.
  llvm::ArrayRef<const CallExpr *> failedWork(const OomRecovery &R) const;
  /// Whether \p Call repeats a call of \p R's try block: the same callee,
  /// spelled the same.
  bool repeatsWork(const CallExpr &Call, const OomRecovery &R) const;
  /// Whether the work \p Work of \p R's try block reads storage written
  /// since the handler began, or storage it changes itself.
  bool readsChangedInput(const CallExpr &Work, const OomRecovery &R) const;

  /// Whether the host memory \p Data points to (from_blob's first argument)
  /// is page-locked.
  Pinning userMemoryPinning(const Expr *Data) const;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_FLOWMODEL_H
