//===--- ModelCheck.h - torch-tidy ------------------------------*- C++ -*-===//
//
// The base of the checks that report what the ProgramModel proves: it walks
// user code only, holds the TU's shared model for the TU's duration, hands
// each analysed body (functions, template instantiations, lambdas) to the
// check, reports a finding once per location however many instantiations
// show it, and writes the notes that walk a fact's path across calls.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_UTILS_MODELCHECK_H
#define TORCH_TIDY_UTILS_MODELCHECK_H

#include "model/ProgramModel.h"
#include "model/TensorFlowAnalysis.h"
#include "clang-tidy/ClangTidyCheck.h"
#include "model/UserCodeTraversal.h"
#include "llvm/ADT/DenseSet.h"
#include <memory>

namespace clang::tidy::torch {

class ModelCheck : public ClangTidyCheck {
public:
  ModelCheck(StringRef Name, ClangTidyContext *Context);

  void registerMatchers(ast_matchers::MatchFinder *Finder) override;
  void check(const ast_matchers::MatchFinder::MatchResult &Result) override;
  void onStartOfTranslationUnit() override;
  void onEndOfTranslationUnit() override;
  bool isLanguageVersionSupported(const LangOptions &LangOpts) const override {
    return LangOpts.CPlusPlus;
  }

protected:
  /// Called once per analysed body whose analysis converged.
  virtual void checkBody(const FunctionDecl &Function,
                         const TensorFlowAnalysis &Analysis,
                         ProgramModel &Program) = 0;

  /// The options the model is built with; each check fills what it reads.
  TorchApiOptions ApiOptions;

  /// The TU's model (valid during check()).
  ProgramModel &program(ASTContext &Ctx);

  /// True the first time a finding is reported at \p Loc in this TU.
  bool firstAt(SourceLocation Loc);

  /// How a message describes a fact that crossed calls: " (from
  /// 'make_background()' at scene.cpp:40)"; "" for a local fact.
  template <typename T>
  std::string fromWhere(const Sourced<T> &Fact, const ASTContext &Ctx) const {
    return fromWhere(Fact.Via, Fact.Origin, Ctx);
  }
  std::string fromWhere(const CallStep *Via, SourceLocation Origin,
                        const ASTContext &Ctx) const;

  /// Notes for a fact: one per call on its path ("%Name comes from the call
  /// of 'f()' here"), then \p AtOrigin (a format with %0 = \p Name) at the
  /// place that established it.
  template <typename T>
  void noteFact(const Sourced<T> &Fact, StringRef Name, StringRef AtOrigin,
                StringRef Detail = "") {
    notePath(Fact.Via, Name);
    if (Fact.Origin.isValid())
      diag(Fact.Origin, AtOrigin, DiagnosticIDs::Note) << Name << Detail;
  }
  void notePath(const CallStep *Via, StringRef Name);

private:
  UserCodeTraversal UserCode;
  std::shared_ptr<ProgramModel> Program;
  llvm::DenseSet<SourceLocation> Reported;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_UTILS_MODELCHECK_H
