//===--- LossAccumulationGraphCheck.cpp - torch-tidy ----------------------===//

#include "LossAccumulationGraphCheck.h"
#include "model/LossAccumulation.h"
#include "model/GradMode.h"
#include "api/TorchMatchers.h"
#include "clang/Lex/Lexer.h"

namespace clang::tidy::torch {

LossAccumulationGraphCheck::LossAccumulationGraphCheck(
    StringRef Name, ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawBackwardFunctions(Options.get("BackwardFunctions", "")),
      RawAccumulatingFunctions(Options.get("AccumulatingFunctions", "")),
      RawGuardTypes(Options.get("GuardTypes", "")) {
  ApiOptions.ExtraBackwardFunctions = parseNameList(RawBackwardFunctions);
  AccumulatingFunctions = parseNameList(RawAccumulatingFunctions);
  GuardTypes = parseNameList(RawGuardTypes);
}

LossAccumulationGraphCheck::~LossAccumulationGraphCheck() = default;

void LossAccumulationGraphCheck::storeOptions(
    ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "BackwardFunctions", RawBackwardFunctions);
  Options.store(Opts, "AccumulatingFunctions", RawAccumulatingFunctions);
  Options.store(Opts, "GuardTypes", RawGuardTypes);
}

void LossAccumulationGraphCheck::onStartOfTranslationUnit() {
  ModelCheck::onStartOfTranslationUnit();
  Oracle.reset();
  OracleProgram = nullptr;
}

/// Whether `E.detach()` parses as intended without parentheses.
static bool isPostfixOperand(const Expr *E) {
  E = E->IgnoreImplicit();
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E))
    return Op->getOperator() == OO_Subscript || Op->getOperator() == OO_Call ||
           Op->getOperator() == OO_Arrow;
  return isa<DeclRefExpr, MemberExpr, CallExpr, ParenExpr, ArraySubscriptExpr>(
      E);
}

void LossAccumulationGraphCheck::checkBody(const FunctionDecl &,
                                           const TensorFlowAnalysis &Analysis,
                                           ProgramModel &Program) {
  if (!Oracle || OracleProgram != &Program) {
    Oracle = std::make_unique<GradModeOracle>(Program, GuardTypes);
    OracleProgram = &Program;
  }
  const ASTContext &Ctx = Program.context();
  for (const GraphAccumulation &F : findGraphAccumulations(
           Analysis, Program, *Oracle, AccumulatingFunctions)) {
    SourceLocation Loc = F.At->getBeginLoc();
    if (!firstAt(Loc))
      continue;
    const auto *VD = dyn_cast<VarDecl>(F.Root.Decl);
    std::string Value = quotedSource(F.A.Value, Ctx, "the value");
    std::string Acc = quotedSource(F.A.Acc, Ctx,
                                   "'" + F.Root.Decl->getNameAsString() + "'");
    std::string Where =
        F.Root.Kind == LoopStorage::Member
            ? "member '" + F.Root.Decl->getNameAsString() + "'"
        : VD && isa<ParmVarDecl>(VD) ? "parameter " + Acc
                                     : Acc + ", declared outside the loop";
    std::string Verb = F.A.Kind == Accumulation::Add      ? "accumulated into"
                       : F.A.Kind == Accumulation::Append ? "appended to"
                                                          : "stored into";
    {
      auto Diag = diag(Loc, "%0%1 is still attached to its autograd graph "
                            "and is %2 %3; every iteration's graph stays "
                            "alive and memory grows with each step")
                  << Value << fromWhere(F.Graph, Ctx) << Verb << Where;
      const Expr *V = F.A.Value->IgnoreImplicit();
      SourceRange VR = V->getSourceRange();
      if (VR.isValid() && !VR.getBegin().isMacroID() &&
          !VR.getEnd().isMacroID()) {
        SourceLocation End = Lexer::getLocForEndOfToken(
            VR.getEnd(), 0, Ctx.getSourceManager(), Ctx.getLangOpts());
        if (isPostfixOperand(V))
          Diag << FixItHint::CreateInsertion(End, ".detach()");
        else
          Diag << FixItHint::CreateInsertion(VR.getBegin(), "(")
               << FixItHint::CreateInsertion(End, ").detach()");
      }
    } // the warning is emitted here, before its notes
    if (!F.Graph.Origin.isMacroID())
      noteFact(F.Graph, Value, "%0 joins the autograd graph here");
  }
}

} // namespace clang::tidy::torch
