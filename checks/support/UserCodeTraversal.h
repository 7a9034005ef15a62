//===--- UserCodeTraversal.h - torch-tidy -----------------------*- C++ -*-===//
//
// clang-tidy's MatchFinder walks every declaration of a TU. With
// `#include <torch/torch.h>` that is LibTorch and the standard library, and
// the walk costs about 10% of the parse. The torch checks only report in user
// code, so each of them narrows the walk to the top-level declarations
// outside system headers, as clangd does for the main file and as newer
// clang-tidy releases do by default. With --system-headers (SystemHeaders:
// true) the walk stays whole, for the other checks of the same run.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_SUPPORT_USERCODETRAVERSAL_H
#define TORCH_TIDY_SUPPORT_USERCODETRAVERSAL_H

#include "clang-tidy/ClangTidyCheck.h"

namespace clang::tidy::torch {

/// Sets the ASTContext's traversal scope to user code when the MatchFinder
/// visits the TranslationUnitDecl, which it does before it reads the scope.
class UserCodeTraversal : public ast_matchers::MatchFinder::MatchCallback {
public:
  explicit UserCodeTraversal(ClangTidyContext *Context);

  /// Call from the owning check's registerMatchers().
  void registerMatchers(ast_matchers::MatchFinder *Finder);
  void run(const ast_matchers::MatchFinder::MatchResult &Result) override;

  /// The top-level declarations of \p Ctx outside system headers.
  static std::vector<Decl *> userDeclarations(ASTContext &Ctx);

private:
  const bool WholeTU;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_SUPPORT_USERCODETRAVERSAL_H
