//===--- TensorToDiscardedCheck.cpp - torch-tidy --------------------------===//

#include "TensorToDiscardedCheck.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "api/TorchMatchers.h"
#include "support/UserCodeParents.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/StmtCXX.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/Lex/Lexer.h"

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

namespace {

/// Longest object expression quoted in the message; longer ones read worse
/// than "the tensor".
constexpr size_t MaxQuotedObjectLength = 40;

/// The full expression whose value is the result of \p Call, when that value
/// is thrown away; null when the result is used (or explicitly cast to void).
const Expr *discardedFullExpression(const Expr &Call, ASTContext &Ctx) {
  const Expr *Current = &Call;
  while (true) {
    llvm::ArrayRef<DynTypedNode> Parents = userCodeParents(*Current, Ctx);
    if (Parents.size() != 1)
      return nullptr;
    const auto *Parent = Parents[0].get<Stmt>();
    if (!Parent)
      return nullptr;
    if (isa<ExprWithCleanups, CXXBindTemporaryExpr, ParenExpr>(Parent)) {
      Current = cast<Expr>(Parent);
      continue;
    }
    return isRunAsStatement(*Parent, *Current, Ctx) ? Current : nullptr;
  }
}

bool isAssignableTensorVariable(const VarDecl &Var) {
  QualType T = Var.getType();
  if (T->isRValueReferenceType())
    return false;
  if (const auto *Ref = T->getAs<LValueReferenceType>())
    T = Ref->getPointeeType();
  return isTensorType(T) && !T.isConstQualified();
}

/// The local variable or parameter named by \p Object when `Object = ...`
/// is a safe rewrite: non-const, not a reference to const, not a capture.
const VarDecl *fixableVariable(const Expr *Object) {
  const auto *Ref = dyn_cast<DeclRefExpr>(Object->IgnoreParenImpCasts());
  if (!Ref || Ref->refersToEnclosingVariableOrCapture() ||
      Ref->getType().isConstQualified())
    return nullptr;
  const auto *Var = dyn_cast<VarDecl>(Ref->getDecl());
  if (!Var || !Var->hasLocalStorage() || !isAssignableTensorVariable(*Var))
    return nullptr;
  return Var;
}

} // namespace

TensorToDiscardedCheck::TensorToDiscardedCheck(StringRef Name,
                                               ClangTidyContext *Context)
    : ClangTidyCheck(Name, Context), UserCode(Context),
      ExtraConversionMethods(Options.get("ExtraConversionMethods", "")) {}

void TensorToDiscardedCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraConversionMethods", ExtraConversionMethods);
}

void TensorToDiscardedCheck::registerMatchers(MatchFinder *Finder) {
  UserCode.registerMatchers(Finder);
  std::vector<StringRef> Names(tensorConversionMethodNames().begin(),
                               tensorConversionMethodNames().end());
  for (StringRef Extra :
       utils::options::parseStringList(ExtraConversionMethods))
    Names.push_back(Extra);
  // Only methods of the tensor classes: `Module::to` does move in place.
  auto TensorClass =
      cxxRecordDecl(hasAnyName("::at::Tensor", "::at::TensorBase"));
  Finder->addMatcher(
      cxxMemberCallExpr(
          callee(cxxMethodDecl(hasAnyName(Names), ofClass(TensorClass),
                               returns(hasCanonicalType(
                                   recordType(hasDeclaration(TensorClass)))))),
          unless(isExpansionInSystemHeader()))
          .bind("call"),
      this);
}

void TensorToDiscardedCheck::check(const MatchFinder::MatchResult &Result) {
  const auto *Call = Result.Nodes.getNodeAs<CXXMemberCallExpr>("call");
  const Expr *Discarded = discardedFullExpression(*Call, *Result.Context);
  if (!Discarded)
    return;
  const auto *Member = dyn_cast<MemberExpr>(Call->getCallee()->IgnoreParens());
  const Expr *Object = Call->getImplicitObjectArgument();
  if (!Member || !Object || !Reported.insert(Call->getBeginLoc()).second)
    return;

  const SourceManager &SM = *Result.SourceManager;
  const LangOptions &LangOpts = getLangOpts();
  StringRef ObjectText = Lexer::getSourceText(
      CharSourceRange::getTokenRange(Object->getSourceRange()), SM, LangOpts);
  bool QuoteObject = !ObjectText.empty() &&
                     ObjectText.size() <= MaxQuotedObjectLength &&
                     !ObjectText.contains('\n');
  bool HasArguments = llvm::any_of(Call->arguments(), [](const Expr *Arg) {
    return !isa<CXXDefaultArgExpr>(Arg);
  });
  std::string Method = Member->getMemberDecl()->getNameAsString();
  std::string Spelled = Method + (HasArguments ? "(...)" : "()");
  std::string Unchanged = "the tensor";
  if (QuoteObject) {
    Spelled = (ObjectText + (Member->isArrow() ? "->" : ".") + Spelled).str();
    Unchanged =
        ("'" + Twine(Member->isArrow() ? "*" : "") + ObjectText + "'").str();
  }

  auto Diag = diag(Call->getBeginLoc(),
                   "result of '%0' is discarded; tensor conversions return a "
                   "new tensor and leave %1 unchanged; only Module::to moves "
                   "in place")
              << Spelled << Unchanged;

  // `x = x.to(...);` assigns the converted copy back. It is only offered
  // where the assignment is certain to compile and to mean what was meant.
  const VarDecl *Var = Member->isArrow() ? nullptr : fixableVariable(Object);
  SourceLocation Begin = Discarded->getBeginLoc();
  if (Var && Begin.isValid() && !Begin.isMacroID() &&
      !Discarded->getEndLoc().isMacroID())
    Diag << FixItHint::CreateInsertion(Begin, Var->getName().str() + " = ");
}

} // namespace clang::tidy::torch
