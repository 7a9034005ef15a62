//===--- GradMode.h - torch-tidy --------------------------------*- C++ -*-===//
//
// Is autograd recording at a statement? Looks for the RAII guards that turn
// it off (torch::NoGradGuard, c10::InferenceMode, torch::AutoGradMode(false)
// and project-specific guard types) in the scopes around the statement,
// through the lambdas it sits in, and in the callers of its function (the
// ProgramModel's call graph, and other TUs' calls after an audit).
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_UTILS_GRADMODE_H
#define TORCH_TIDY_UTILS_GRADMODE_H

#include "clang/AST/ASTContext.h"
#include "clang/AST/Decl.h"
#include "clang/AST/Stmt.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include <string>
#include <vector>

namespace clang::tidy::torch {

enum class GradModeAt {
  /// Provably recording: no guard in scope, in the enclosing lambdas or in
  /// any caller in the TU, or a closer AutoGradMode(true) re-enables it.
  Enabled,
  /// A guard that turns autograd off is in scope (here or in a caller).
  Disabled,
  /// Something the analysis cannot decide: a guard with a run-time value,
  /// GradMode::set_enabled(x), a function whose address escapes, a caller
  /// chain deeper than the limit.
  Unknown,
};

/// What a guard variable does to autograd for the rest of its scope.
enum class GuardEffect { None, Disables, Enables, Unknown };

/// The effect of declaring \p VD: NoGradGuard and InferenceMode() disable,
/// AutoGradMode(false) disables, AutoGradMode(true) enables, a run-time
/// argument is Unknown; a variable of a type in \p ExtraGuardTypes
/// (qualified with `::`, or plain) disables.
GuardEffect guardEffect(const VarDecl &VD, const ASTContext &Ctx,
                        const std::vector<std::string> &ExtraGuardTypes);

class ProgramModel;

/// Answers on the ProgramModel's call sites; callers in other TUs count
/// through the entry contexts an audit exported.
class GradModeOracle {
public:
  GradModeOracle(ProgramModel &Program,
                 std::vector<std::string> ExtraGuardTypes,
                 unsigned CallerDepth = 4);

  /// Whether autograd records at \p S.
  GradModeAt at(const Stmt &S);

private:
  GradModeAt at(const Stmt &S, unsigned Depth);
  GradModeAt callersOf(const FunctionDecl &FD, unsigned Depth);

  ProgramModel &Program;
  ASTContext &Ctx;
  std::vector<std::string> ExtraGuardTypes;
  unsigned CallerDepth;
  llvm::SmallVector<const FunctionDecl *, 4> InProgress;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_UTILS_GRADMODE_H
