//===--- DeviceMismatchCheck.h - torch-tidy ---------------------*- C++ -*-===//

#ifndef TORCH_TIDY_DEVICEMISMATCHCHECK_H
#define TORCH_TIDY_DEVICEMISMATCHCHECK_H

#include "analysis/TorchApi.h"
#include "clang-tidy/ClangTidyCheck.h"
#include "utils/UserCodeTraversal.h"

namespace clang::tidy::torch {

class TensorFlowAnalysis;
struct ValueFacts;

/// Flags a module call, operator or multi-tensor function whose operands the
/// flow analysis proves to be on different devices.
///
/// For the user-facing documentation see:
/// docs/checks/torch-device-mismatch.md
class DeviceMismatchCheck : public ClangTidyCheck {
public:
  DeviceMismatchCheck(StringRef Name, ClangTidyContext *Context);
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void registerMatchers(ast_matchers::MatchFinder *Finder) override;
  void check(const ast_matchers::MatchFinder::MatchResult &Result) override;
  bool isLanguageVersionSupported(const LangOptions &LangOpts) const override {
    return LangOpts.CPlusPlus;
  }

private:
  UserCodeTraversal UserCode;
  struct Operand {
    const Expr *E;
    std::string Name;
  };
  void checkOperands(const Stmt &At, llvm::StringRef What,
                     const Operand &First, const ValueFacts &FirstFacts,
                     const Operand &Second, const ValueFacts &SecondFacts,
                     bool IsModuleCall, bool AllowsZeroDimCPU);

  const StringRef RawExtraFactories;
  TorchApiOptions ApiOptions;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_DEVICEMISMATCHCHECK_H
