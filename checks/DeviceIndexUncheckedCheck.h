//===--- DeviceIndexUncheckedCheck.h - torch-tidy ---------------*- C++ -*-===//

#ifndef TORCH_TIDY_DEVICEINDEXUNCHECKEDCHECK_H
#define TORCH_TIDY_DEVICEINDEXUNCHECKEDCHECK_H

#include "clang-tidy/ClangTidyCheck.h"
#include "model/UserCodeTraversal.h"
#include "llvm/ADT/DenseSet.h"
#include <memory>

namespace clang::tidy::torch {

class DeviceCountGuards;
class ProgramModel;

/// Flags a hard-coded CUDA ordinal above 0 (`torch::Device(torch::kCUDA, 1)`,
/// `"cuda:3"`) that no `device_count()` comparison proves to exist
/// (analysis/DeviceCountGuards.h).
///
/// For the user-facing documentation see:
/// docs/checks/torch-device-index-unchecked.md
class DeviceIndexUncheckedCheck : public ClangTidyCheck {
public:
  DeviceIndexUncheckedCheck(StringRef Name, ClangTidyContext *Context);
  ~DeviceIndexUncheckedCheck() override;
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void registerMatchers(ast_matchers::MatchFinder *Finder) override;
  void check(const ast_matchers::MatchFinder::MatchResult &Result) override;
  void onStartOfTranslationUnit() override;
  void onEndOfTranslationUnit() override;
  bool isLanguageVersionSupported(const LangOptions &LangOpts) const override {
    return LangOpts.CPlusPlus;
  }

private:
  UserCodeTraversal UserCode;
  void reportOrdinal(const Expr &Site, SourceLocation OrdinalLoc,
                     int64_t Ordinal, ASTContext &Ctx);

  /// Further functions, fully qualified, that return the device count.
  const StringRef ExtraDeviceCountFunctions;
  std::vector<std::string> CountFunctions;
  std::shared_ptr<ProgramModel> Program;
  std::unique_ptr<DeviceCountGuards> Guards;
  llvm::DenseSet<SourceLocation> Reported;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_DEVICEINDEXUNCHECKEDCHECK_H
