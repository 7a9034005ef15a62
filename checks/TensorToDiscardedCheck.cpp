//===--- TensorToDiscardedCheck.cpp - torch-tidy --------------------------===//
//
// What it watches for: a statement that throws away a value the model knows
// to be a converted copy (the result of `to`, `cuda`, `contiguous`, ..., on
// every path). The model carries that fact through conditionals, and through
// the returns of helpers and lambdas that change nothing else the caller
// sees; storing the copy anywhere the caller can read ends it.
//
//===----------------------------------------------------------------------===//

#include "TensorToDiscardedCheck.h"
#include "api/TorchMatchers.h"
#include "clang/AST/ExprCXX.h"
#include "clang/Lex/Lexer.h"

namespace clang::tidy::torch {

namespace {

/// Longest object expression quoted in the message; longer ones read worse
/// than "the tensor".
constexpr size_t MaxQuotedObjectLength = 40;

class DiscardedConversion : public Requirement {
public:
  llvm::StringRef name() const override { return "discarded-conversion"; }

  bool match(const Stmt &S, const FlowModel &M, const State &St,
             RequirementMatch &Out) const override {
    // The innermost expression of a discarded full expression, once.
    const auto *E = dyn_cast<Expr>(&S);
    // An operator's value is its operands' (`x = x.cuda()` is `x`): only
    // a call of a function or a callable, or a conditional, makes one.
    const auto *Op = dyn_cast_or_null<CXXOperatorCallExpr>(E);
    if (!E || !isa<CallExpr, ConditionalOperator>(E) ||
        (Op && Op->getOperator() != OO_Call) ||
        E->getType()->isReferenceType() || !isTensorType(E->getType()) ||
        S.getBeginLoc().isInvalid() ||
        M.context().getSourceManager().isInSystemHeader(S.getBeginLoc()))
      return false;
    const Expr *Discarded = discardedFullExpression(*E, M.context());
    if (!Discarded)
      return false;
    ValueFacts F = M.evaluate(E, St);
    if (F.ConvertedCopy.isInvalid())
      return false;
    Out.Operands.push_back({F, "", E});
    Out.Places.push_back(Discarded);
    return true;
  }

  Verdict judge(const RequirementMatch &, const SiteContext &) const override {
    return Verdict::Violated;
  }
};

const DiscardedConversion Instance;
const RequirementRegistration Registered(Instance);

/// The local variable or parameter named by \p Object when `Object = ...`
/// is a safe rewrite: non-const, not a reference to const, not a capture.
const VarDecl *fixableVariable(const Expr *Object) {
  const auto *Ref = dyn_cast<DeclRefExpr>(Object->IgnoreParenImpCasts());
  if (!Ref || Ref->refersToEnclosingVariableOrCapture() ||
      Ref->getType().isConstQualified())
    return nullptr;
  const auto *Var = dyn_cast<VarDecl>(Ref->getDecl());
  if (!Var || !Var->hasLocalStorage())
    return nullptr;
  QualType T = Var->getType();
  if (T->isRValueReferenceType())
    return nullptr;
  if (const auto *Ref = T->getAs<LValueReferenceType>())
    T = Ref->getPointeeType();
  return isTensorType(T) && !T.isConstQualified() ? Var : nullptr;
}

} // namespace

TensorToDiscardedCheck::TensorToDiscardedCheck(StringRef Name,
                                               ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      ExtraConversionMethods(Options.get("ExtraConversionMethods", "")) {
  Kind = &Instance;
}

void TensorToDiscardedCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraConversionMethods", ExtraConversionMethods);
}

void TensorToDiscardedCheck::report(const Violation &V, ProgramModel &Program) {
  const Operand &Result = V.Match.Operands[0];
  const auto *Discarded = cast<Expr>(V.Match.Places[0]);
  const ASTContext &Ctx = Program.context();
  const SourceManager &SM = Ctx.getSourceManager();
  SourceLocation Loc = Result.Source->getBeginLoc();
  if (!firstAt(Loc))
    return;

  // Written here: `x.to(device);`.
  const auto *Call = dyn_cast<CXXMemberCallExpr>(Result.Source);
  const auto *Member =
      Call ? dyn_cast<MemberExpr>(Call->getCallee()->IgnoreParens()) : nullptr;
  if (Member && Result.Facts.ConvertedCopy == Call->getExprLoc()) {
    const Expr *Object = Call->getImplicitObjectArgument();
    StringRef ObjectText = Lexer::getSourceText(
        CharSourceRange::getTokenRange(Object->getSourceRange()), SM,
        getLangOpts());
    bool QuoteObject = !ObjectText.empty() &&
                       ObjectText.size() <= MaxQuotedObjectLength &&
                       !ObjectText.contains('\n');
    std::string Spelled = Member->getMemberDecl()->getNameAsString() +
                          (hasSpelledArgument(*Call) ? "(...)" : "()");
    std::string Unchanged = "the tensor";
    if (QuoteObject) {
      Spelled = (ObjectText + (Member->isArrow() ? "->" : ".") + Spelled).str();
      Unchanged =
          ("'" + Twine(Member->isArrow() ? "*" : "") + ObjectText + "'").str();
    }
    auto Diag = diag(Loc, "result of '%0' is discarded; tensor conversions "
                          "return a new tensor and leave %1 unchanged; only "
                          "Module::to moves in place")
                << Spelled << Unchanged;
    // `x = x.to(...);` assigns the converted copy back, where that is
    // certain to compile and to mean what was meant.
    const VarDecl *Var = Member->isArrow() ? nullptr : fixableVariable(Object);
    SourceLocation Begin = Discarded->getBeginLoc();
    if (Var && Begin.isValid() && !Begin.isMacroID() &&
        !Discarded->getEndLoc().isMacroID())
      Diag << FixItHint::CreateInsertion(Begin, Var->getName().str() + " = ");
    return;
  }

  // Returned by a helper or a lambda, or by either arm of a conditional.
  std::string Spelled = "the conditional expression";
  if (const auto *Returning = dyn_cast<CallExpr>(Result.Source)) {
    const FunctionDecl *Callee = Returning->getDirectCallee();
    Spelled = quotedSource(Returning, Ctx,
                           Callee ? Program.calleeName(*Callee) : "the call");
  }
  diag(Loc, "result of %0 is discarded; it is a converted copy of a tensor, "
            "which the conversion left unchanged; only Module::to moves in "
            "place")
      << Spelled;
  notePath(Result.Facts.ConvertedVia, "the converted copy");
  diag(Result.Facts.ConvertedCopy, "the conversion is here",
       DiagnosticIDs::Note);
}

} // namespace clang::tidy::torch
