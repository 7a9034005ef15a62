//===--- LossAccumulationGraphCheck.h - torch-tidy --------------*- C++ -*-===//

#ifndef TORCH_TIDY_LOSSACCUMULATIONGRAPHCHECK_H
#define TORCH_TIDY_LOSSACCUMULATIONGRAPHCHECK_H

#include "analysis/TorchApi.h"
#include "clang-tidy/ClangTidyCheck.h"
#include "utils/TrainingLoop.h"
#include "utils/UserCodeTraversal.h"
#include <memory>

namespace clang::tidy::torch {

class GradModeOracle;

/// Flags a tensor that the flow analysis proves to be attached to an
/// autograd graph (a module output, a loss, arithmetic on them, outside any
/// no-grad guard) accumulated into storage that outlives the loop iteration:
/// `total += loss`, `total = total + loss`, `losses.push_back(loss)`.
///
/// For the user-facing documentation see:
/// docs/checks/torch-loss-accumulation-graph.md
class LossAccumulationGraphCheck : public ClangTidyCheck {
public:
  LossAccumulationGraphCheck(StringRef Name, ClangTidyContext *Context);
  ~LossAccumulationGraphCheck() override;
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override;
  void registerMatchers(ast_matchers::MatchFinder *Finder) override;
  void check(const ast_matchers::MatchFinder::MatchResult &Result) override;
  void onStartOfTranslationUnit() override;
  bool isLanguageVersionSupported(const LangOptions &LangOpts) const override {
    return LangOpts.CPlusPlus;
  }

  /// One accumulation: `Acc op= Value`, `Acc = Acc + Value`,
  /// `Acc.push_back(Value)`.
  struct Accumulation {
    enum KindType { Add, Append, Store } Kind = Add;
    const Expr *Acc = nullptr;
    const Expr *Value = nullptr;
    llvm::StringRef Method;
  };
  bool matchAccumulation(const Stmt &S, Accumulation &Out) const;

private:
  UserCodeTraversal UserCode;
  const StringRef RawBackwardFunctions;
  const StringRef RawAccumulatingFunctions;
  const StringRef RawGuardTypes;
  TrainingLoopOptions LoopOptions;
  std::vector<std::string> AccumulatingFunctions;
  std::vector<std::string> GuardTypes;
  TorchApiOptions ApiOptions;
  std::unique_ptr<GradModeOracle> Oracle;
  const ASTContext *OracleContext = nullptr;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_LOSSACCUMULATIONGRAPHCHECK_H
