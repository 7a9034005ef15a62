//===--- ModelCheck.h - torch-tidy ------------------------------*- C++ -*-===//
//
// The base of the checks that report what the ProgramModel proves: it walks
// user code only, holds the TU's one model for the TU's duration (configured
// module-wide, so that every check of the TU shares it), hands each analysed
// function (functions, template instantiations, lambdas, globals'
// initialisers) to the check, reports a finding once per location however
// many instantiations show it, and writes the notes that walk a fact's path
// across calls.
//
//===----------------------------------------------------------------------===//

#ifndef TORCH_TIDY_MODELCHECK_H
#define TORCH_TIDY_MODELCHECK_H

#include "model/FlowAnalysis.h"
#include "model/ProgramModel.h"
#include "support/UserCodeTraversal.h"
#include "clang-tidy/ClangTidyCheck.h"
#include "llvm/ADT/DenseSet.h"
#include <memory>

namespace clang::tidy::torch {

/// The model's configuration for the file being checked: each vocabulary
/// list is the union of the global `torch.<Name>` option and every check's
/// `<check>.<Name>`; `torch.Summaries` names the facts of other TUs.
ModelConfig modelConfigFor(const ClangTidyContext &Context);

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
  /// Called once per analysable function (\p Owner is a FunctionDecl) or
  /// global with an initialiser (a VarDecl).
  virtual void checkFunction(const Decl &Owner, ProgramModel &Program);

  /// Called by the default checkFunction for each violation of \p Kind.
  virtual void report(const Violation &V, ProgramModel &Program) {}
  /// The requirement whose violations report() receives; null for none.
  const Requirement *Kind = nullptr;

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
  /// For a callee's obligation: "which calls 'f()' here" per call inside
  /// the callee, ending at the place it was matched with \p AtMatch.
  void noteIntoCallee(const Violation &V, StringRef AtMatch);
  /// How messages name an operand: its own name, or the expression.
  std::string nameOf(const Operand &Op, const ASTContext &Ctx,
                     StringRef Fallback, size_t MaxLength = 40) const;
  /// Where a violation is: at the statement, or, for a callee's obligation,
  /// \p InCallee ? where it was matched in the callee : at the call.
  SourceLocation locationOf(const Violation &V, bool InCallee) const;

private:
  UserCodeTraversal UserCode;
  std::shared_ptr<ProgramModel> Program;
  llvm::DenseSet<SourceLocation> Reported;
  ModelConfig Config;
};

} // namespace clang::tidy::torch

#endif // TORCH_TIDY_MODELCHECK_H
