//===--- KeepGoing.cpp - torch-tidy ---------------------------------------===//

#include "KeepGoing.h"
#include "clang-tidy/ClangTidyCheck.h"
#include "clang/Lex/Preprocessor.h"

namespace clang::tidy::torch {
namespace {

/// Forwards everything clang-tidy asks of a check to the check itself; the
/// check registers its own matchers, so the matches reach it directly.
class KeepGoingCheck : public ClangTidyCheck {
public:
  KeepGoingCheck(StringRef Name, ClangTidyContext *Context,
                 std::unique_ptr<ClangTidyCheck> Check)
      : ClangTidyCheck(Name, Context), Check(std::move(Check)) {}

  bool isLanguageVersionSupported(const LangOptions &LangOpts) const override {
    return Check->isLanguageVersionSupported(LangOpts);
  }
  void registerPPCallbacks(const SourceManager &SM, Preprocessor *PP,
                           Preprocessor *ModuleExpanderPP) override {
    PP->getDiagnostics().setFatalsAsError(true);
    Check->registerPPCallbacks(SM, PP, ModuleExpanderPP);
  }
  void registerMatchers(ast_matchers::MatchFinder *Finder) override {
    Check->registerMatchers(Finder);
  }
  void storeOptions(ClangTidyOptions::OptionMap &Opts) override {
    Check->storeOptions(Opts);
  }
  std::optional<TraversalKind> getCheckTraversalKind() const override {
    return Check->getCheckTraversalKind();
  }

private:
  std::unique_ptr<ClangTidyCheck> Check;
};

} // namespace

void keepGoingPastFatalErrors(ClangTidyCheckFactories &Factories,
                              StringRef Prefix) {
  std::vector<std::pair<std::string, ClangTidyCheckFactories::CheckFactory>>
      Wrapped;
  for (const auto &Entry : Factories)
    if (Entry.getKey().starts_with(Prefix))
      Wrapped.emplace_back(Entry.getKey().str(), Entry.getValue());
  for (auto &[Name, Make] : Wrapped)
    Factories.registerCheckFactory(
        Name, [Make = std::move(Make)](StringRef Name, ClangTidyContext *Ctx)
                  -> std::unique_ptr<ClangTidyCheck> {
          return std::make_unique<KeepGoingCheck>(Name, Ctx, Make(Name, Ctx));
        });
}

} // namespace clang::tidy::torch
