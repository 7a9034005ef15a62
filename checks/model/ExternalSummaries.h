//===--- ExternalSummaries.h - torch-tidy -----------------------*- C++ -*-===//
//
// Facts about functions defined in other translation units, in the spirit
// of the clang static analyzer's cross-TU mode: each TU of an audit exports
// the summaries of its externally visible functions, keyed by USR, and the
// facts at the calls it makes; the audit merges them and computes every
// function's entry context over the whole program's calls; a later run of
// any TU reads them back. This file knows nothing of checks: every fact
// travels under its name (FactsJson.h), so a new fact never touches it.
//
// The format is versioned JSON (SummaryJson.cpp). A summary read back names
// the callee's parameters by index and its places by file, line and column;
// lookup() rebuilds it against the reading TU's AST.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_EXTERNALSUMMARIES_H
#define TORCH_TIDY_MODEL_EXTERNALSUMMARIES_H

#include "Summary.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include <memory>
#include <optional>
#include <string>

namespace clang::tidy::torch {

class ProgramModel;
struct EntryContext;

/// The version of the exported format; a file of another version is not
/// read.
constexpr int SummaryFormatVersion = 5;

/// The facts of other TUs that the analyses of one TU asked for, provided
/// or not: a second analysis of the TU with the program's facts can differ
/// from the first only where one of them is known (CrossTU.h).
struct ExternalReads {
  /// Functions called but not defined here, whose summary was asked for.
  llvm::StringSet<> Summaries;
  /// Functions whose entry context was asked for.
  llvm::StringSet<> Entries;
  /// Whether a function without callers asked if its program has a main.
  bool Main = false;
};

class ExternalSummaries {
public:
  /// Reads a summary file (`--summaries=FILE`, `torch.Summaries`) or the
  /// summaries of an audit cache directory; a one-line error when it cannot.
  static llvm::Expected<std::shared_ptr<ExternalSummaries>>
  load(llvm::StringRef Path);
  /// Parses one document (`{"version": 2, "functions": {...}, ...}`).
  static llvm::Expected<std::shared_ptr<ExternalSummaries>>
  parse(llvm::StringRef JSON);

  /// Adds the functions and entries of \p Document; a function already
  /// present with a different summary is noted as conflicting, and
  /// finishEntries() drops it.
  llvm::Error merge(const llvm::json::Object &Document);
  /// Adds one TU's export (exportTranslationUnit): its functions, and its
  /// calls for the entry contexts that finishEntries() computes.
  llvm::Error addExport(const llvm::json::Object &Export);
  /// Drops the conflicting functions, then computes the entry context of
  /// every function called somewhere, over the whole program's calls: what
  /// every call establishes (a greatest fixpoint through callers), and
  /// where some call runs it (a least one).
  void finishEntries();

  /// The summary of \p F (declared, not defined, in \p Program's TU).
  std::optional<FunctionSummary> lookup(const FunctionDecl &F,
                                        ProgramModel &Program) const;
  /// What the whole program knows at the entry of \p F (USR \p USR).
  std::optional<EntryContext> entry(llvm::StringRef USR, const FunctionDecl &F,
                                    ProgramModel &Program) const;
  /// Whether the program that the TU of \p MainFile belongs to has a main:
  /// the TUs that calls connect, one of which defines main. (A database
  /// may hold several programs.)
  bool definesMainFor(llvm::StringRef MainFile) const;

  /// The whole set, as a document to write.
  llvm::json::Object toJSON() const;
  bool empty() const { return Functions.empty() && Entries.empty(); }
  size_t size() const { return Functions.size(); }
  bool contains(llvm::StringRef USR) const { return Functions.count(USR); }
  bool hasEntry(llvm::StringRef USR) const { return Entries.count(USR); }
  /// Whether \p Other gives \p USR the same entry context (or none, as
  /// this).
  bool sameEntry(llvm::StringRef USR, const ExternalSummaries &Other) const;
  /// A digest of the facts of \p USRs, for cache keys.
  std::string digestOf(llvm::ArrayRef<std::string> USRs) const;

private:
  llvm::StringMap<llvm::json::Object> Functions;
  llvm::StringMap<llvm::json::Object> Entries;
  std::vector<llvm::json::Object> Calls;
  llvm::StringSet<> AddressTaken;
  /// USRs with different definitions in different TUs (merge()); dropped
  /// by finishEntries().
  llvm::StringSet<> Conflicting;
  /// Per export (addExport): its TU's main file and whether it defines
  /// main; the TU that defines each function (~0u when several do: an
  /// inline function, or one name in separate programs); the TU of each call.
  std::vector<std::string> ExportFiles;
  std::vector<bool> ExportDefinesMain;
  llvm::StringMap<unsigned> DefinedIn;
  std::vector<unsigned> CallTU;
  /// The main files of TUs whose program has a main (finishEntries, or read
  /// back), and the USRs of the mains.
  llvm::StringSet<> ProgramsWithMain;
  llvm::StringSet<> Mains;
  /// Whether some TU defines main; what a document without files says.
  bool HasMain = false;
  bool KnowsFiles = false;
};

/// The USR of \p D ("" when clang gives none).
std::string usrOf(const Decl &D);

/// The summaries this TU exports (its externally visible functions defined
/// in user code), the facts at its calls of externally visible functions,
/// and the external facts its checks asked for (call it after them), as
/// one document.
llvm::json::Object exportTranslationUnit(ProgramModel &Program);

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_EXTERNALSUMMARIES_H
