//===--- ProgramModel.h - torch-tidy ----------------------------*- C++ -*-===//
//
// The interprocedural model of one translation unit, shared by every torch
// check: one call graph of the user code (clang::CallGraph, template
// instantiations and lambdas included), one analysis per function body, one
// summary per function (FunctionSummary.h) and one entry state per class
// (ClassState.h), all computed on demand and kept for the TU.
//
// Checks ask for it with ProgramModel::get() and drop it at the end of the
// TU. Checks configured with the same options share one model.
//
// Summaries are computed bottom-up: analysing a function asks for the
// summaries of the functions it calls, which are analysed first. A function
// in a cycle of the call graph, a virtual call with an overrider that may
// run, and a call through a pointer have no summary: every fact about them
// is unknown, and unknown never warns. Functions defined in other TUs get
// the summaries an earlier audit exported (ExternalSummaries), when the
// driver provides them.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_ANALYSIS_PROGRAMMODEL_H
#define TORCH_TIDY_ANALYSIS_PROGRAMMODEL_H

#include "ClassState.h"
#include "ExternalSummaries.h"
#include "FunctionSummary.h"
#include "api/TorchApi.h"
#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclCXX.h"
#include "clang/Analysis/CallGraph.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Allocator.h"
#include "llvm/Support/StringSaver.h"
#include <memory>
#include <optional>
#include <vector>

namespace clang::tidy::torch {

class TensorFlowAnalysis;

/// A call (or construction) of a function in the user code of the TU.
struct CallSite {
  const Expr *Call = nullptr;
  /// The function or lambda whose body contains it; null in a namespace- or
  /// class-scope initialiser.
  const FunctionDecl *Caller = nullptr;
};

class ProgramModel {
public:
  /// The model of \p Ctx's TU for checks configured with \p Opts; built on
  /// first use and freed when the last check drops it.
  static std::shared_ptr<ProgramModel> get(ASTContext &Ctx,
                                           const TorchApiOptions &Opts);

  /// Summaries of functions defined in other TUs, for every model created
  /// after the call (the driver's --summaries and --audit). Thread-safe.
  static void setExternalSummaries(std::shared_ptr<const ExternalSummaries> S);

  ProgramModel(ASTContext &Ctx, const TorchApiOptions &Opts);
  ~ProgramModel();
  ProgramModel(const ProgramModel &) = delete;
  ProgramModel &operator=(const ProgramModel &) = delete;

  ASTContext &context() const { return Ctx; }
  const TorchApiOptions &options() const { return Opts; }

  //===--- Analyses ------------------------------------------------------===//

  /// The converged analysis of \p Function's body (a function, an
  /// instantiation or a lambda's call operator); null when it has no body in
  /// user code, no CFG, or the analysis stopped at its cap.
  const TensorFlowAnalysis *analysis(const FunctionDecl &Function);

  /// Whether the flow-sensitive checks report in \p Function: user code, a
  /// template instantiation, or a template pattern that has none and
  /// depends on no template parameter in its body.
  bool isAnalyzable(const FunctionDecl &Function);

  //===--- Call graph ----------------------------------------------------===//

  const CallGraph &callGraph();
  /// Every call of \p Callee (any redeclaration) in the user code of the TU.
  llvm::ArrayRef<CallSite> callSitesOf(const FunctionDecl &Callee);
  /// Whether the user code refers to \p F other than by calling it (its
  /// address is taken): then calls the analysis cannot see may exist.
  bool isAddressTaken(const FunctionDecl &F);
  /// Whether \p F is in a cycle of the call graph.
  bool isRecursive(const FunctionDecl &F);
  /// Whether the TU defines `main`: its other functions are then the
  /// program's own and are called from it.
  bool definesMain();

  //===--- Summaries -----------------------------------------------------===//

  /// The summary of the function \p Call calls, or null when nothing is
  /// known about it (see above). \p Call is a CallExpr or CXXConstructExpr.
  const FunctionSummary *summaryForCall(const Expr &Call);
  /// The summary of \p F itself (its definition, or an external one).
  const FunctionSummary *summary(const FunctionDecl &F);
  /// What the whole program (an earlier audit) knows at \p F's entry.
  std::optional<EntryContext> entryContext(const FunctionDecl &F) const;
  /// The external facts asked for so far by the models of this TU, with
  /// any options.
  const ExternalReads &externalReads() const { return *Reads; }
  /// The members' facts at entry to a member function of \p Class.
  const ClassState &classState(const CXXRecordDecl &Class);

  /// Whether \p Call calls a method, on `*this`, of a class whose state is
  /// being computed: such calls are left out then (ClassState.cpp checks
  /// each member function's own writes).
  bool callsClassUnderConstruction(const CallExpr &Call) const;
  /// Members that code writes through an object other than `*this`.
  const llvm::DenseSet<const FieldDecl *> &foreignWrittenMembers();
  /// A fresh analysis of \p Function from \p Entry (its entry state when
  /// null), not kept.
  std::unique_ptr<TensorFlowAnalysis> analyse(const FunctionDecl &Function,
                                              const TensorState *Entry);

  /// The user-code declaration with USR \p USR (a member, a function, a
  /// variable), or null.
  const NamedDecl *declarationOf(llvm::StringRef USR);

  //===--- Paths of notes --------------------------------------------------===//

  /// An interned step; equal steps are the same pointer.
  const CallStep *step(SourceLocation Call, llvm::StringRef Callee,
                       const CallStep *Next);
  /// How notes name a callee: "'render()'".
  std::string calleeName(const FunctionDecl &F) const;

private:
  void buildCallGraph();
  const FunctionDecl *definitionOf(const FunctionDecl &F) const;
  TensorState entryState(const FunctionDecl &Function);
  bool isBuilding(const CXXRecordDecl *Class) const;

  ASTContext &Ctx;
  TorchApiOptions Opts;
  std::shared_ptr<const ExternalSummaries> External;
  /// Shared by the models of the TU (get()).
  std::shared_ptr<ExternalReads> Reads;

  bool GraphBuilt = false;
  CallGraph Graph;
  llvm::DenseMap<const FunctionDecl *, llvm::SmallVector<CallSite, 2>> Sites;
  llvm::DenseMap<const FunctionDecl *, unsigned> NonCallReferences;
  llvm::DenseSet<const FunctionDecl *> Recursive;
  bool HasMain = false;

  llvm::DenseMap<const FunctionDecl *, std::unique_ptr<TensorFlowAnalysis>>
      Analyses;
  llvm::DenseMap<const FunctionDecl *, std::optional<FunctionSummary>>
      Summaries;
  llvm::DenseSet<const FunctionDecl *> InProgress;
  unsigned Depth = 0;
  llvm::DenseMap<const CXXRecordDecl *, std::unique_ptr<ClassState>> Classes;
  /// The classes whose state is being computed, innermost last.
  llvm::SmallVector<const CXXRecordDecl *, 2> Building;
  std::optional<llvm::StringMap<const NamedDecl *>> DeclarationsByUSR;
  bool ForeignWritesFound = false;
  llvm::DenseSet<const FieldDecl *> ForeignWrites;

  llvm::BumpPtrAllocator Arena;
  llvm::UniqueStringSaver Strings{Arena};
  llvm::DenseMap<std::pair<const CallStep *, std::pair<unsigned, const char *>>,
                 const CallStep *>
      Steps;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_ANALYSIS_PROGRAMMODEL_H
