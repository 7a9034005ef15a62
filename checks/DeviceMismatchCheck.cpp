//===--- DeviceMismatchCheck.cpp - torch-tidy -----------------------------===//

#include "DeviceMismatchCheck.h"
#include "analysis/TensorFlowAnalysis.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "utils/TorchMatchers.h"
#include "clang/Lex/Lexer.h"

using namespace clang::ast_matchers;

namespace clang::tidy::torch {

DeviceMismatchCheck::DeviceMismatchCheck(StringRef Name,
                                         ClangTidyContext *Context)
    : ClangTidyCheck(Name, Context), UserCode(Context),
      RawExtraFactories(Options.get("ExtraFactories", "")) {
  ApiOptions.ExtraFactories = parseNameList(RawExtraFactories);
}

void DeviceMismatchCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "ExtraFactories", RawExtraFactories);
}

void DeviceMismatchCheck::registerMatchers(MatchFinder *Finder) {
  UserCode.registerMatchers(Finder);
  registerAnalyzedBodyMatchers(*Finder, *this);
}

/// How a warning names an operand: its source text when short.
static std::string operandName(const Expr *E, const ASTContext &Ctx) {
  E = stripConversions(E);
  CharSourceRange Range = CharSourceRange::getTokenRange(E->getSourceRange());
  StringRef Text = Lexer::getSourceText(Range, Ctx.getSourceManager(),
                                        Ctx.getLangOpts());
  if (Text.empty() || Text.size() > 40 || Text.contains('\n'))
    return "operand";
  return ("'" + Text + "'").str();
}

static bool isElementwiseFunction(const FunctionDecl &FD) {
  if (!FD.getIdentifier())
    return false;
  StringRef N = FD.getName();
  return N == "add" || N == "sub" || N == "mul" || N == "div" || N == "where";
}

void DeviceMismatchCheck::checkOperands(
    const Stmt &At, StringRef What, const Operand &First,
    const ValueFacts &FirstFacts, const Operand &Second,
    const ValueFacts &SecondFacts, bool IsModuleCall, bool AllowsZeroDimCPU) {
  const DeviceValue &A = FirstFacts.Device.Value;
  const DeviceValue &B = SecondFacts.Device.Value;
  DeviceConflict Conflict = compareDevices(A, B);
  if (Conflict == DeviceConflict::None)
    return;
  // Element-wise operators accept a 0-dim CPU tensor next to a CUDA one.
  if (AllowsZeroDimCPU && ((A.isCPU() && FirstFacts.MayBeZeroDim) ||
                           (B.isCPU() && SecondFacts.MayBeZeroDim)))
    return;
  std::string Message;
  if (IsModuleCall)
    Message = "module " + First.Name + " has its parameters on " +
              A.describe() + " but is called with " + Second.Name + " on " +
              B.describe();
  else
    Message = What.str() + " combines " + First.Name + " on " + A.describe() +
              " with " + Second.Name + " on " + B.describe();
  if (Conflict == DeviceConflict::OnAcceleratorMachine) {
    const DeviceValue &Symbolic = A.isSymbolic() ? A : B;
    Message += "; this crashes on a machine where " + Symbolic.describe() +
               " is CUDA";
  }
  SourceLocation Loc = isa<Expr>(At) ? cast<Expr>(At).getExprLoc()
                                     : At.getBeginLoc();
  diag(Loc, "%0") << Message;
  auto Note = [&](const Operand &O, const ValueFacts &F) {
    if (F.Device.Origin.isValid())
      diag(F.Device.Origin, "%0 is on %1 from here", DiagnosticIDs::Note)
          << O.Name << F.Device.Value.describe();
  };
  Note(First, FirstFacts);
  Note(Second, SecondFacts);
}

void DeviceMismatchCheck::check(const MatchFinder::MatchResult &Result) {
  std::optional<AnalyzedBody> Body = getAnalyzedBody(Result);
  if (!Body)
    return;
  std::unique_ptr<TensorFlowAnalysis> Analysis = TensorFlowAnalysis::run(
      *Body->Function, *Body->Body, *Result.Context, ApiOptions);
  if (!Analysis || !Analysis->converged())
    return;
  const TensorModel &Model = Analysis->model();
  const ASTContext &Ctx = *Result.Context;

  Analysis->replay([&](const Stmt &S, const TensorState &State) {
    const auto *E = dyn_cast<Expr>(&S);
    if (!E)
      return;
    ModuleCall MC;
    if (matchModuleCall(*E, MC)) {
      ValueFacts Module = Model.evaluate(MC.Module, State);
      for (const Expr *Input : MC.Inputs)
        if (isTensorType(Input->getType()))
          checkOperands(S, "", {MC.Module, operandName(MC.Module, Ctx)},
                        Module, {Input, operandName(Input, Ctx)},
                        Model.evaluate(Input, State), /*IsModuleCall=*/true,
                        /*AllowsZeroDimCPU=*/false);
      return;
    }
    llvm::SmallVector<const Expr *, 4> Operands;
    std::string What;
    bool Elementwise = false;
    if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E)) {
      OverloadedOperatorKind K = Op->getOperator();
      bool Arithmetic = K == OO_Plus || K == OO_Minus || K == OO_Star ||
                        K == OO_Slash || K == OO_PlusEqual ||
                        K == OO_MinusEqual || K == OO_StarEqual ||
                        K == OO_SlashEqual;
      if (!Arithmetic || Op->getNumArgs() != 2)
        return;
      What = std::string("operator '") + getOperatorSpelling(K) + "'";
      Operands = {Op->getArg(0), Op->getArg(1)};
      Elementwise = true;
    } else if (const auto *Call = dyn_cast<CallExpr>(E)) {
      const FunctionDecl *FD = Call->getDirectCallee();
      if (!FD || !isMultiTensorFunction(*FD))
        return;
      What = "'" + FD->getQualifiedNameAsString() + "'";
      Elementwise = isElementwiseFunction(*FD);
      for (const Expr *Arg : Call->arguments()) {
        const Expr *Stripped = stripConversions(Arg);
        if (const auto *Std = dyn_cast<CXXStdInitializerListExpr>(Stripped))
          Stripped = stripConversions(Std->getSubExpr());
        if (const auto *List = dyn_cast<InitListExpr>(Stripped))
          Operands.append(List->inits().begin(), List->inits().end());
        else if (isTensorType(Arg->getType()))
          Operands.push_back(Arg);
      }
    } else {
      return;
    }
    llvm::SmallVector<ValueFacts, 4> Facts;
    for (const Expr *O : Operands)
      Facts.push_back(isTensorType(O->getType()) ? Model.evaluate(O, State)
                                                 : ValueFacts());
    // Report the first conflicting pair only: one warning per operation.
    for (size_t I = 0; I < Operands.size(); ++I)
      for (size_t J = I + 1; J < Operands.size(); ++J) {
        DeviceConflict C = compareDevices(Facts[I].Device.Value,
                                          Facts[J].Device.Value);
        if (C == DeviceConflict::None)
          continue;
        if (Elementwise &&
            ((Facts[I].Device.Value.isCPU() && Facts[I].MayBeZeroDim) ||
             (Facts[J].Device.Value.isCPU() && Facts[J].MayBeZeroDim)))
          continue;
        checkOperands(S, What, {Operands[I], operandName(Operands[I], Ctx)},
                      Facts[I], {Operands[J], operandName(Operands[J], Ctx)},
                      Facts[J], /*IsModuleCall=*/false, Elementwise);
        return;
      }
  });
}

} // namespace clang::tidy::torch
