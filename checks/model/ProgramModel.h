//===--- ProgramModel.h - torch-tidy ----------------------------*- C++ -*-===//
//
// The interprocedural model of one translation unit, shared by every torch
// check: one call graph of the user code (clang::CallGraph, template
// instantiations and lambdas included), and one mechanism that carries every
// fact across calls in both directions:
//  - bottom-up, a summary per function (Summary.h): what it returns, what it
//    does to what its caller sees, and the requirements its callers must
//    judge; computed from an analysis that starts from "whatever each entry
//    value is";
//  - top-down, an entry context per function (EntryContext): what every
//    caller establishes (CUDA checked, autograd off, the facts of each
//    parameter, member and global when the callers agree) and where some
//    caller runs it (inside a loop, on every training step); the function
//    is analysed again from it for reporting.
// Both are memoised; a function in a cycle of the call graph, a virtual
// call with several targets and a call through a pointer have no summary,
// and their callees no context from them: unknown never warns. Functions
// of other TUs get the facts an earlier audit exported (ExternalSummaries).
//
// Checks ask for it with ProgramModel::get(); one model per TU.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_PROGRAMMODEL_H
#define TORCH_TIDY_MODEL_PROGRAMMODEL_H

#include "ClassState.h"
#include "ExternalSummaries.h"
#include "Summary.h"
#include "api/Devices.h"
#include "api/TorchApi.h"
#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ParentMap.h"
#include "clang/Analysis/CallGraph.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Allocator.h"
#include "llvm/Support/StringSaver.h"
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace clang::tidy::torch {

class FlowAnalysis;

/// A call (or construction) of a function in the user code of the TU.
struct CallSite {
  const Expr *Call = nullptr;
  /// The function or lambda whose body contains it; null in a namespace- or
  /// class-scope initialiser.
  const FunctionDecl *Caller = nullptr;
  /// Set for a destructor run where this local's scope ends; Call is then
  /// its initialiser, which runs in the same loops.
  const VarDecl *Destroyed = nullptr;
  /// Call starts a thread that runs the function (`std::thread(f, args)`):
  /// it starts with the thread's defaults, not the caller's modes.
  bool ThreadStart = false;
};

/// What the classes of a module tell about a fresh instance.
struct ModuleClassFacts {
  /// A user-defined constructor moves the module (`to(...)` in its body).
  bool ConstructorMoves = false;
  /// No when the module provably has no parameters (a loss module).
  Tri HasParameters = Tri::Unknown;
  /// Yes when it holds a Dropout or BatchNorm layer; No when it provably
  /// holds none.
  Tri ModeLayers = Tri::Unknown;
};

/// What a call is asked to run. PerStep: a backward pass or a step on
/// every run of the call, outside any loop of a callee (a callee with its own
/// training loop is a whole training run: its caller's loop is not a
/// training loop through it).
enum class TrainingCall { Backward, Step, BackwardOrStep, PerStep };

/// What the callers of a function establish at its entry.
struct EntryContext {
  /// The entry state the function is analysed from for reporting: the
  /// facts of its parameters, members, captured variables and globals that
  /// every caller agrees on, and the path facts every caller establishes.
  State Entry;
  /// The function has no caller in the program: its entry is the program's
  /// (main), or unknown.
  bool Root = true;
  /// No call statement of this TU runs it: every caller is in another TU
  /// (an audit's summaries), or it is a destructor run where a scope ends.
  /// What the callers leave to it is judged here, at the callee.
  bool NoCallJudges = false;
  /// A lambda that no call is seen to run: its context is where it is
  /// written, a guess that proves where it runs for no requirement.
  bool OnlyWhereWritten = false;
  /// The first call that does not check CUDA availability, for notes.
  const Expr *UncheckedCall = nullptr;
  /// Where the unchecked path through UncheckedCall starts: the function
  /// that has no unchecked caller itself, and its call towards this one
  /// (null when the path starts here).
  const FunctionDecl *UncheckedPathStart = nullptr;
  const Expr *UncheckedPathCall = nullptr;
  /// A call made on every iteration of a training loop, and in a loop.
  LoopContext Loop;
  const Expr *LoopCall = nullptr;
  /// The largest device count that some caller proves, and where.
  int64_t CountAtLeast = 0;
  const Expr *CountProof = nullptr;
  /// Some caller's analysis was still under way (it asked, through a
  /// summary or a class state, for this context): it is computed again.
  bool Complete = true;
};

/// How the checks configure the model: module-wide, so that one TU has one
/// model whatever checks run.
struct ModelConfig {
  TorchApiOptions Api;
  /// Facts of other TUs (`torch.Summaries`, or the driver's audit).
  std::shared_ptr<const ExternalSummaries> External;
  /// The TU is one of a whole program that is analysed together (an
  /// audit exports its facts), so a main it defines is its program's:
  /// known before the program's facts arrive.
  bool WholeProgram = false;
};

class ProgramModel {
public:
  /// The model of \p Ctx's TU, built on first use and freed when the last
  /// holder drops it. \p Config applies when the model is created.
  static std::shared_ptr<ProgramModel> get(ASTContext &Ctx,
                                           const ModelConfig &Config);

  ProgramModel(ASTContext &Ctx, ModelConfig Config);
  ~ProgramModel();
  ProgramModel(const ProgramModel &) = delete;
  ProgramModel &operator=(const ProgramModel &) = delete;

  ASTContext &context() const { return Ctx; }
  const TorchApiOptions &options() const { return Config.Api; }

  //===--- Analyses ------------------------------------------------------===//

  /// The analysis of \p Function from its callers' context, for reporting;
  /// null when it has no body in user code, no CFG, or did not converge.
  const FlowAnalysis *analysis(const FunctionDecl &Function);
  /// The analysis from "whatever each entry value is", for its summary.
  const FlowAnalysis *summaryAnalysis(const FunctionDecl &Function);
  /// The scalar inputs whose values decide what \p Function does, in its
  /// entry terms: the parameters, and fields of parameters and of `*this`,
  /// that a branch tests (an if, a switch, a `?:`), that it stores in an
  /// object, sets autocast or a module's mode from, or passes on to a
  /// callee's deciding input. A call that knows one takes its branch.
  llvm::SmallVector<Location, 2> decidingInputs(const FunctionDecl &Function);
  /// \p Function's summary where the inputs in \p Constants hold those
  /// values (`set_mode(m, Phase::Evaluate)`); null as summary() is.
  const FunctionSummary *summaryWithConstants(
      const FunctionDecl &Function,
      llvm::ArrayRef<std::pair<Location, int64_t>> Constants);
  /// Whether the flow-sensitive checks report in \p Function: user code, a
  /// template instantiation, or a template pattern that has none and
  /// depends on no template parameter in its body.
  bool isAnalyzable(const FunctionDecl &Function);
  /// "Whatever each entry value is": the state the summary analysis of
  /// \p Function starts from.
  State parametricEntry(const FunctionDecl &Function);
  /// A fresh analysis of \p Function from \p Entry, not kept.
  std::unique_ptr<FlowAnalysis> analyse(const FunctionDecl &Function,
                                        State Entry);

  //===--- Call graph ----------------------------------------------------===//

  const CallGraph &callGraph();
  /// Every call of \p Callee (any redeclaration) in the user code of the TU,
  /// constructions through std::make_shared and module holders included.
  llvm::ArrayRef<CallSite> callSitesOf(const FunctionDecl &Callee);
  /// The functions that every call of \p Function writes for its callable
  /// parameter \p Index (a lambda, `f`, `&f`), when no other TU may call
  /// it; none when a call passes anything else.
  std::optional<llvm::SmallVector<const FunctionDecl *, 2>>
  writtenCallables(const FunctionDecl &Function, unsigned Index);
  /// The definitions in user code that override \p Method, directly or
  /// through another override, in source order.
  llvm::ArrayRef<const FunctionDecl *> overridersOf(const CXXMethodDecl &Method);
  /// For a virtual call whose target is not certain: each override the TU
  /// defines in a class of the object's, which may run there, with its
  /// summary (those without one are left out).
  using Dispatched =
      llvm::SmallVector<std::pair<const FunctionDecl *, const FunctionSummary *>, 2>;
  Dispatched dispatchedSummaries(const CallExpr &Call);
  /// Every function that some call of the TU's user code runs: clang's
  /// CallGraph leaves out constructors defined in other TUs.
  std::vector<const FunctionDecl *> calledFunctions();
  /// Where the lambda whose call operator is \p Op is written.
  llvm::ArrayRef<CallSite> creationSitesOf(const FunctionDecl &Op);
  /// The calls of callables (std::function, function pointers) that may
  /// run \p F in their caller's context analysis: some path stored F in
  /// what they call.
  llvm::SmallVector<CallSite, 2> callableCallSitesOf(const FunctionDecl &F);
  /// Whether the user code refers to \p F other than by calling it.
  bool isAddressTaken(const FunctionDecl &F);
  bool isRecursive(const FunctionDecl &F);
  /// Whether the whole program, as an audit sees it, has a `main`: its
  /// other functions are then reached from it or not at all. One TU alone
  /// cannot tell (another may call its functions): false without an audit.
  bool programDefinesMain();
  /// The TU's main file, absolute.
  std::string mainFileName() const;

  //===--- Summaries and contexts ------------------------------------------===//

  /// The function \p Call runs: its callee, or for a virtual call the one
  /// definition that can run (certainCallee, or the only one in view when
  /// the main file defines the class); null when not known.
  const FunctionDecl *calleeOf(const CallExpr &Call);
  /// The summary of the function \p Call runs (a CallExpr or
  /// CXXConstructExpr), or null when nothing is known about it.
  const FunctionSummary *summaryForCall(const Expr &Call);
  const FunctionSummary *summary(const FunctionDecl &F);
  /// What the callers of \p F establish at its entry.
  const EntryContext &entryContext(const FunctionDecl &F);
  /// Whether \p Function's context analysis is under way.
  bool isAnalysing(const FunctionDecl &Function) const;
  /// Whether the function that lifted \p O reports it itself, at its
  /// statement or at its call (Via): a member of `*this` or a device it
  /// chose leaves it to the callers, and its context proves it.
  bool reportedAtStatement(const Obligation &O);
  /// Whether the function that lifted \p O through its call (Via) reports
  /// it at that call, or left it to a callee that does.
  bool reportedAtCall(const Obligation &O);
  /// The external facts asked for so far.
  const ExternalReads &externalReads() const { return Reads; }

  //===--- Program-wide facts ----------------------------------------------===//

  /// The members' facts at entry to a member function of \p Class.
  const ClassState &classState(const CXXRecordDecl &Class);
  /// What a global, or the part \p Part of one (`g_norm.mean`), holds
  /// wherever it is read: its initialiser joined with every write in the
  /// program.
  ValueFacts globalFacts(const VarDecl &Global, const Location &Part = {});
  const ModuleClassFacts &moduleClassFacts(QualType ModuleType);
  /// No when a user module class provably has no parameters.
  Tri userModuleParameters(const CXXRecordDecl &RD);
  Tri userModuleModeLayers(const CXXRecordDecl &RD);
  /// Members that code writes through an object other than `*this`.
  const llvm::DenseSet<const FieldDecl *> &foreignWrittenMembers();
  /// Whether \p Field can name a caller's object for its object's lifetime
  /// (MemberBindings.cpp): a reference, or a module handle that no method
  /// reseats.
  bool isBindingMember(const FieldDecl &Field);
  /// Whether a constructor of \p Field's class binds it to an argument.
  bool isBoundByConstructor(const FieldDecl &Field);
  /// Whether \p Class or a base of it has a binding member.
  bool hasBindingMember(const CXXRecordDecl &Class);
  /// The parameter of \p Ctor whose argument \p Field names once \p Ctor
  /// has run, through base and delegated constructors; none when it names
  /// no argument.
  std::optional<unsigned> boundParameter(const CXXConstructorDecl &Ctor,
                                         const FieldDecl &Field,
                                         unsigned Depth = 0);
  /// Whether a method of \p Class is being analysed to compute its state.
  bool isBuilding(const CXXRecordDecl *Class) const;
  /// The innermost class being built whose objects run \p Class's methods
  /// on themselves: \p Class or a class derived from it.
  const CXXRecordDecl *buildingObjectOf(const CXXRecordDecl *Class) const;
  bool callsClassUnderConstruction(const CallExpr &Call) const;
  /// How many answers were given short because a class was being built.
  unsigned buildCuts() const { return BuildCuts; }
  /// While the state of \p Class, or of a class derived from it, is
  /// computed: its members' facts so far, the invariant that a call of one
  /// of \p Class's methods on `*this` leaves (every method is analysed from
  /// it until it holds); null otherwise.
  const llvm::DenseMap<Location, ValueFacts> *
  classInvariantSoFar(const CXXRecordDecl *Class) const;
  void setClassInvariantSoFar(const CXXRecordDecl &Class,
                              const llvm::DenseMap<Location, ValueFacts> *Facts);
  /// The path facts after a global's initialiser has run (CUDA selected in
  /// it, unchecked, before main).
  PathFacts initializerPath(const VarDecl &Global);

  /// The graph sources (Facts.h) that a backward() reaches anywhere in the
  /// TU.
  const llvm::DenseSet<const Stmt *> &graphsBackpropagated();
  /// The graph sources whose graphs \p F hands back to its caller: in the
  /// value it returns.
  const llvm::DenseSet<const Stmt *> &graphsReturnedBy(const FunctionDecl &F);
  /// The graph sources whose graphs \p F lets outlive it: in a member, a
  /// global, a reference parameter or its returned value, or handed to an
  /// opaque call.
  const llvm::DenseSet<const Stmt *> &graphsKeptBy(const FunctionDecl &F);
  /// The largest device count any comparison of the TU proves, and the
  /// comparison.
  std::pair<int64_t, const Expr *> largestCountProven();

  //===--- Vocabulary through summaries -------------------------------------===//

  /// Whether \p Call itself runs \p What: it is such a call, or it calls a
  /// user function whose summary proves one.
  bool callTrains(const CallExpr &Call, TrainingCall What);
  /// Whether \p Call may run a backward pass or a step: it trains, or it is
  /// an opaque call that receives a tensor.
  bool mayTrain(const CallExpr &Call);
  /// Whether a call of \p Callee runs \p What (its summary proves it); and
  /// whether it may run a backward pass or a step.
  bool functionTrains(const FunctionDecl &Callee, TrainingCall What);
  bool functionMayTrain(const FunctionDecl &Callee);
  /// How \p Literal (in the body or initialisers of \p Owner, a function,
  /// or in a global's initialiser) is consumed.
  DeviceLiteralUse deviceLiteralUse(const Expr &Literal, const Decl &Owner);

  //===--- Requirements ----------------------------------------------------===//

  /// The requirements found violated in \p Owner (a function, or a global's
  /// initialiser), judged in its callers' context: its own statements, and
  /// the obligations of its callees at its calls.
  const std::vector<Violation> &violations(const Decl &Owner);
  /// The analysis of a global's initialiser, as it runs before main.
  const FlowAnalysis *initializerAnalysis(const VarDecl &Global);

  //===--- Names -----------------------------------------------------------===//

  /// The user-code declaration with USR \p USR, or null.
  const NamedDecl *declarationOf(llvm::StringRef USR);
  /// An interned step; equal steps are the same pointer.
  const CallStep *step(SourceLocation Call, llvm::StringRef Callee,
                       const CallStep *Next);
  /// How notes name a callee: "'render()'".
  std::string calleeName(const FunctionDecl &F) const;
  /// A copy of \p S that lives as long as the model, null-terminated; equal
  /// texts share one copy.
  llvm::StringRef intern(llvm::StringRef S) { return Strings.save(S); }

private:
  void buildCallGraph();
  const FunctionDecl *definitionOf(const FunctionDecl &F) const;
  EntryContext computeEntryContext(const FunctionDecl &F);
  FunctionSummary buildSummary(const FunctionDecl &F, const FlowAnalysis &A);
  void judge(const FlowAnalysis &A, bool Lift, std::vector<Violation> *Found,
             std::vector<Obligation> *Lifted);

  ASTContext &Ctx;
  ModelConfig Config;
  ExternalReads Reads;

  bool GraphBuilt = false;
  CallGraph Graph;
  llvm::DenseMap<const FunctionDecl *, llvm::SmallVector<CallSite, 2>> Sites;
  /// Where each lambda is written: its context when nothing visible calls
  /// it (it is stored in a std::function, handed to user code).
  llvm::DenseMap<const FunctionDecl *, llvm::SmallVector<CallSite, 1>>
      LambdaCreations;
  /// Every call of a callable (a std::function, a function pointer), in
  /// source order.
  std::vector<CallSite> CallableCalls;
  llvm::DenseMap<const FunctionDecl *, unsigned> NonCallReferences;
  llvm::DenseMap<const FunctionDecl *, llvm::SmallVector<const FunctionDecl *, 2>>
      Overriders;
  llvm::DenseSet<const FunctionDecl *> Recursive;
  bool HasMain = false;

  llvm::DenseMap<const FunctionDecl *, std::unique_ptr<FlowAnalysis>>
      SummaryAnalyses, ContextAnalyses;
  // The maps below whose values are handed out by reference or pointer
  // keep them at a fixed address: a computation that holds one computes
  // more, and a DenseMap moves its values when it grows.
  llvm::DenseMap<const FunctionDecl *, std::unique_ptr<FunctionSummary>>
      Summaries; // null: no summary
  /// Summaries for constant arguments, and the analyses they came from.
  std::map<std::pair<const FunctionDecl *,
                     std::vector<std::pair<Location, int64_t>>>,
           std::pair<std::unique_ptr<FlowAnalysis>,
                     std::unique_ptr<FunctionSummary>>>
      ConstantSummaries;
  llvm::DenseMap<const FunctionDecl *, llvm::SmallVector<Location, 2>>
      DecidingInputs;
  llvm::DenseSet<const FunctionDecl *> InProgress, AnalysesUnderWay;
  unsigned Depth = 0;
  /// Calls deeper than this are unknown: the stack of analyses stays bounded.
  static constexpr unsigned MaxSummaryDepth = 48;
  /// Function analyses run for the code of each file of the TU (what the
  /// checks report in it, and what that needs); a realistic file runs tens
  /// to hundreds. Per file, so that a header library that exhausts its
  /// budget (toml++, nlohmann/json as a user header) leaves the rest of
  /// the TU analysed.
  /// (A std::map: DenseMap's empty key is the invalid FileID, which a
  /// request outside any check's uses.)
  std::map<FileID, unsigned> AnalysesRun;
  FileID ReportingFile;
  /// While it lives, the analyses run for a request about Owner are paid
  /// from the budget of its file (of the outermost request's, when one is
  /// under way).
  class Paying {
  public:
    Paying(ProgramModel &Program, const Decl &Owner);
    ~Paying() { Program.ReportingFile = Saved; }
    Paying(const Paying &) = delete;
    Paying &operator=(const Paying &) = delete;

  private:
    ProgramModel &Program;
    FileID Saved;
  };
  static constexpr unsigned MaxAnalysesPerFile = 4000;
  llvm::DenseMap<const FunctionDecl *, std::unique_ptr<EntryContext>> Contexts;
  llvm::DenseSet<const FunctionDecl *> ContextsInProgress;
  std::unordered_map<const Decl *, std::vector<Violation>> Violations;
  llvm::DenseSet<const Decl *> ViolationsUnderWay;
  /// The calls (function, call location, callee statement, requirement)
  /// whose violation a function below them reports.
  std::set<std::tuple<const Decl *, unsigned, const Stmt *, const Requirement *>>
      ReportedBelow;
  llvm::DenseMap<const VarDecl *, std::unique_ptr<FlowAnalysis>> Initializers;
  llvm::DenseMap<const CXXRecordDecl *, std::unique_ptr<ClassState>> Classes;
  llvm::SmallVector<const CXXRecordDecl *, 2> Building;
  llvm::DenseMap<const CXXRecordDecl *, const llvm::DenseMap<Location, ValueFacts> *>
      InvariantsSoFar;
  /// Answers given short because a class's state was being built (a method
  /// of it without its summary, the class state itself). What was computed
  /// with one of them is not kept while a build is under way: it is
  /// recomputed once the class state is known.
  mutable unsigned BuildCuts = 0;
  /// What was answered short so far: while a class was built, and for want
  /// of budget. An answer computed from a short one is not kept.
  struct Cuts {
    unsigned Build = 0, Budget = 0;
  };
  Cuts cuts() const { return {BuildCuts, BudgetCuts}; }
  bool keepable(Cuts Before) const {
    return (BuildCuts == Before.Build || Building.empty()) &&
           BudgetCuts == Before.Budget;
  }
  unsigned BudgetCuts = 0;
  /// Changes whenever a class's build starts, ends or starts a round: a
  /// summary answered short during a build is not kept, but is reused in
  /// the same epoch (else each caller of a method that calls the class's
  /// methods analyses it again, exponentially in the depth of the calls).
  unsigned BuildEpoch = 0;
  llvm::DenseMap<const FunctionDecl *, std::pair<unsigned, const FunctionSummary *>>
      SummariesThisBuild;
  std::vector<std::unique_ptr<FlowAnalysis>> TransientAnalyses;
  std::vector<std::unique_ptr<FunctionSummary>> TransientSummaries;
  std::vector<std::unique_ptr<EntryContext>> TransientContexts;
  /// Class states computed while a constructor's caller was analysed
  /// (ClassState::Provisional), reused until an analysis under way ends.
  llvm::DenseMap<const CXXRecordDecl *,
                 std::pair<unsigned, std::unique_ptr<ClassState>>>
      ProvisionalClasses;
  unsigned AnalysesFinished = 0;
  std::vector<std::unique_ptr<ClassState>> TransientClasses;
  /// Each global's tree: the whole and its parts (none during a cycle).
  llvm::DenseMap<const VarDecl *, std::optional<State>> Globals;
  std::unordered_map<const Type *, ModuleClassFacts> ModuleClasses;
  std::optional<llvm::StringMap<const NamedDecl *>> DeclarationsByUSR;
  llvm::DenseMap<const FieldDecl *, bool> BindingMembers;
  bool ForeignWritesFound = false;
  llvm::DenseSet<const FieldDecl *> ForeignWrites;
  llvm::DenseMap<const Decl *, std::unique_ptr<ParentMap>> ParentMaps;
  std::optional<llvm::DenseSet<const Stmt *>> Backpropagated;
  std::unordered_map<const FunctionDecl *, llvm::DenseSet<const Stmt *>>
      Returned, Kept;
  std::optional<std::pair<int64_t, const Expr *>> LargestCount;

  llvm::BumpPtrAllocator Arena;
  llvm::UniqueStringSaver Strings{Arena};
  llvm::DenseMap<std::pair<const CallStep *, std::pair<unsigned, const char *>>,
                 const CallStep *>
      Steps;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_PROGRAMMODEL_H
