//===--- DeviceIndexUncheckedCheck.h - torch-tidy ---------------*- C++ -*-===//

#ifndef TORCH_TIDY_DEVICEINDEXUNCHECKEDCHECK_H
#define TORCH_TIDY_DEVICEINDEXUNCHECKEDCHECK_H

#include "clang-tidy/ClangTidyCheck.h"
#include "utils/UserCodeTraversal.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include <optional>

namespace clang::tidy::torch {

/// Flags a hard-coded CUDA ordinal above 0 (`torch::Device(torch::kCUDA, 1)`,
/// `"cuda:3"`) that no `device_count()` comparison in its function, or in a
/// caller of it, proves to exist.
///
/// For the user-facing documentation see:
/// docs/checks/torch-device-index-unchecked.md
class DeviceIndexUncheckedCheck : public ClangTidyCheck {
public:
  DeviceIndexUncheckedCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void registerMatchers(ast_matchers::MatchFinder *Finder) override;
  void check(const ast_matchers::MatchFinder::MatchResult &Result) override;
  void onStartOfTranslationUnit() override;
  bool isLanguageVersionSupported(const LangOptions &LangOpts) const override {
    return LangOpts.CPlusPlus;
  }

  /// What the `device_count()` comparisons of one scope prove.
  struct GuardFacts {
    /// Every ordinal up to this one is known to exist; -1 when nothing is.
    int64_t GuardedUpTo = -1;
    /// The comparison that proves the most, for the note.
    const Expr *Comparison = nullptr;
  };

private:
  UserCodeTraversal UserCode;
  void reportOrdinal(const Expr &Site, SourceLocation OrdinalLoc,
                     int64_t Ordinal, ASTContext &Ctx);
  const GuardFacts &guardsInFunction(const FunctionDecl &Function,
                                     ASTContext &Ctx);
  GuardFacts guardsOnCallPaths(const FunctionDecl &Function, ASTContext &Ctx);
  void buildCallers(ASTContext &Ctx);

  /// Further functions, fully qualified, that return the device count.
  const StringRef ExtraDeviceCountFunctions;
  std::vector<StringRef> CountFunctions;

  llvm::DenseMap<const FunctionDecl *, GuardFacts> GuardCache;
  std::optional<GuardFacts> TranslationUnitGuards;
  /// Callee -> the functions of the main file and user headers calling it.
  std::optional<llvm::DenseMap<const FunctionDecl *,
                               llvm::SmallVector<const FunctionDecl *, 2>>>
      Callers;
  /// The bodies of the functions of the main file and user headers.
  std::vector<const Stmt *> UserRoots;
  llvm::DenseSet<SourceLocation> Reported;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_DEVICEINDEXUNCHECKEDCHECK_H
