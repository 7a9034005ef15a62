//===--- ExternalSummaries.h - torch-tidy -----------------------*- C++ -*-===//
//
// Facts about functions defined in other translation units, in the spirit
// of the clang static analyzer's cross-TU mode: each TU of an audit exports
// the summaries of its externally visible functions, keyed by USR, and what
// it knows at the calls it makes to functions defined elsewhere; a later
// run of any TU reads them back for the functions it only declares.
//
// The format is versioned JSON (SummaryJson.cpp). A summary read back names
// the callee's parameters by index and its places by file, line and column;
// lookup() rebuilds it against the caller's AST.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_ANALYSIS_EXTERNALSUMMARIES_H
#define TORCH_TIDY_ANALYSIS_EXTERNALSUMMARIES_H

#include "FunctionSummary.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include <memory>
#include <optional>
#include <string>

namespace clang::tidy::torch {

class ProgramModel;

/// The version of the exported format; a file of another version is not
/// read.
constexpr int SummaryFormatVersion = 1;

/// What the whole program knows at the entry of a function: facts that only
/// its callers, possibly in other TUs, decide.
struct EntryContext {
  /// Every call reaches it only where CUDA is available (or from a function
  /// whose own entry is): torch-cuda-unguarded's guard.
  bool CudaGuarded = false;
  /// Every call runs it with autograd off (a NoGradGuard around the call).
  bool GradDisabled = false;
};

/// The facts of other TUs that the analyses of one TU asked for, provided
/// or not: a second analysis of the TU with the program's summaries can
/// differ from the first only where one of them is known (CrossTU.h).
struct ExternalReads {
  /// Functions called but not defined here, whose summary was asked for.
  llvm::StringSet<> Summaries;
  /// Functions whose entry context was asked for.
  llvm::StringSet<> Entries;
};

class ExternalSummaries {
public:
  /// Reads a summary file (`--summaries=FILE`) or the summaries of an audit
  /// cache directory; a one-line error when it cannot.
  static llvm::Expected<std::shared_ptr<ExternalSummaries>>
  load(llvm::StringRef Path);
  /// Parses one document (`{"version": 1, "functions": {...}, ...}`).
  static llvm::Expected<std::shared_ptr<ExternalSummaries>>
  parse(llvm::StringRef JSON);

  /// Adds the functions and entries of \p Document; a function already
  /// present with a different summary is noted as conflicting, and
  /// finishEntries() drops it.
  llvm::Error merge(const llvm::json::Object &Document);
  /// Adds one TU's export (exportTranslationUnit): its functions, and its
  /// calls for the entry contexts that finishEntries() computes.
  llvm::Error addExport(const llvm::json::Object &Export);
  /// Drops the conflicting functions, then computes the entry contexts of
  /// every function called somewhere: guarded when each call is guarded
  /// where it is made or sits in a function whose own entry is (a greatest
  /// fixpoint over the whole program's calls).
  void finishEntries();

  /// The summary of \p F (declared, not defined, in \p Program's TU).
  std::optional<FunctionSummary> lookup(const FunctionDecl &F,
                                        ProgramModel &Program) const;
  /// What the whole program knows at the entry of the function \p USR;
  /// nullopt when nothing.
  std::optional<EntryContext> entry(llvm::StringRef USR) const;

  /// The whole set, as a document to write.
  llvm::json::Object toJSON() const;
  bool empty() const { return Functions.empty() && Entries.empty(); }
  size_t size() const { return Functions.size(); }
  bool contains(llvm::StringRef USR) const { return Functions.count(USR); }
  bool hasEntry(llvm::StringRef USR) const { return Entries.count(USR); }
  /// A digest of the summaries of \p USRs, for cache keys.
  std::string digestOf(llvm::ArrayRef<std::string> USRs) const;

  void setEntry(llvm::StringRef USR, EntryContext E) { Entries[USR] = E; }

private:
  struct Call {
    std::string Callee, Caller;
    bool CudaGuarded = false, GradDisabled = false;
  };
  llvm::StringMap<llvm::json::Object> Functions;
  llvm::StringMap<EntryContext> Entries;
  std::vector<Call> Calls;
  llvm::StringSet<> AddressTaken;
  /// USRs with different definitions in different TUs (merge()); dropped
  /// by finishEntries().
  llvm::StringSet<> Conflicting;
};

/// \p S as exported for \p F.
llvm::json::Object serializeSummary(const FunctionDecl &F,
                                    const FunctionSummary &S,
                                    const SourceManager &SM);

/// The USR of \p D ("" when clang gives none).
std::string usrOf(const Decl &D);

/// The summaries this TU exports (its externally visible functions defined
/// in user code), what it records at its calls of functions it does not
/// define, and the external facts its checks asked for (call it after
/// them), as one document.
llvm::json::Object exportTranslationUnit(ProgramModel &Program);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_ANALYSIS_EXTERNALSUMMARIES_H
