//===--- FactsJson.h - torch-tidy -------------------------------*- C++ -*-===//
//
// Facts as JSON, each under its name: value facts, path facts, loop
// contexts, locations, obligations and summaries. A fact is written in the
// terms of one function (its parameters by index, its members by name,
// globals by USR, places by file, line and column) and read back against
// the reading TU's declaration of that function; what the reader cannot
// name is unknown.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODEL_FACTSJSON_H
#define TORCH_TIDY_MODEL_FACTSJSON_H

#include "Summary.h"
#include "clang/Basic/SourceManager.h"
#include "llvm/Support/JSON.h"

namespace clang::tidy::torch {

class ProgramModel;

class FactWriter {
public:
  /// \p F names the function whose terms the facts are in (null: none).
  FactWriter(const SourceManager &SM, const FunctionDecl *F) : SM(SM), F(F) {}

  llvm::json::Value place(SourceLocation Loc) const;
  llvm::json::Array path(const CallStep *Via) const;
  llvm::json::Value entry(const ValueDecl *D) const;
  llvm::json::Object facts(const ValueFacts &V) const;
  llvm::json::Object pathFacts(const PathFacts &P) const;
  llvm::json::Object loop(const LoopContext &L) const;
  llvm::json::Value location(const Location &L) const;
  llvm::json::Object obligation(const Obligation &O) const;
  llvm::json::Object summary(const FunctionSummary &S) const;

private:
  const SourceManager &SM;
  const FunctionDecl *F;
};

/// Two written FACTS objects joined over paths, as joinFacts() joins them:
/// a fact stays where both agree (its origin may differ).
llvm::json::Object joinFactObjects(const llvm::json::Object &Mine,
                                   const llvm::json::Object &Theirs);

class FactReader {
public:
  /// \p F is the reading TU's declaration of the function whose terms the
  /// facts are in (null: none).
  FactReader(ProgramModel &Program, const FunctionDecl *F)
      : Program(Program), F(F) {}

  SourceLocation place(const llvm::json::Value *V) const;
  const CallStep *path(const llvm::json::Array *Steps) const;
  const ValueDecl *entry(const llvm::json::Value *V) const;
  ValueFacts facts(const llvm::json::Object *O) const;
  PathFacts pathFacts(const llvm::json::Object *O) const;
  LoopContext loop(const llvm::json::Object *O) const;
  Location location(const llvm::json::Value *V) const;
  std::optional<Obligation> obligation(const llvm::json::Object &O) const;
  std::optional<FunctionSummary> summary(const llvm::json::Object &O) const;

private:
  ProgramModel &Program;
  const FunctionDecl *F;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODEL_FACTSJSON_H
