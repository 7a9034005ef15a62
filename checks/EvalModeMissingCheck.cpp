//===--- EvalModeMissingCheck.cpp - torch-tidy ----------------------------===//
//
// What it requires: a module whose layers depend on the mode (Dropout,
// BatchNorm) runs in evaluation mode where it evaluates (a forward under a
// no-grad guard, in a loop without backward(), or in one of the project's
// evaluation functions), and in training mode where its output trains. The
// mode is a value fact of the module (train(), eval(), creation; joined
// over paths, through calls and callers); a mode that a caller gives is the
// callers' to decide.
//
//===----------------------------------------------------------------------===//

#include "EvalModeMissingCheck.h"
#include "api/TorchMatchers.h"
#include "clang/Lex/Lexer.h"

namespace clang::tidy::torch {

namespace {

enum : unsigned {
  InsideModuleForward = 1,
  InEvaluationFunction = 2,
  /// The violation is a training forward on a module left in eval mode.
  TrainsInEvalMode = 4,
};

class ForwardInRightMode : public Requirement {
public:
  llvm::StringRef name() const override { return "forward-in-right-mode"; }

  bool match(const Stmt &S, const FlowModel &M, const State &St,
             RequirementMatch &Out) const override {
    const auto *Call = dyn_cast<CallExpr>(&S);
    ModuleCall MC;
    if (!Call || Call->isTypeDependent() || !M.runsModule(*Call, MC) ||
        MC.TypeErased)
      return false;
    Out.Operands.push_back({M.evaluate(MC.Module, St), "", MC.Module});
    // A layer's forward inside a module's forward or own method runs in
    // the mode of the module that calls it: that call is the one judged.
    if (M.isOwnLayer(MC))
      Out.Flags |= InsideModuleForward;
    if (M.function() &&
        matchesNameList(*M.function(), M.options().EvaluationFunctions))
      Out.Flags |= InEvaluationFunction;
    return true;
  }

  Verdict judge(const RequirementMatch &M, const SiteContext &C) const override {
    const ValueFacts &Module = M.Operands[0].Facts;
    // Layers unknown here may be known where the callers built the module.
    if ((M.Flags & InsideModuleForward) || Module.ModeLayers == Tri::No ||
        (Module.ModeLayers == Tri::Unknown && !isCallerEntry(Module.Mode)))
      return Verdict::Holds;
    ModuleMode Mode = Module.Mode.Value;
    bool Evaluation = (M.Flags & InEvaluationFunction) ||
                      C.Path.Grad == GradMode::Disabled ||
                      C.Loop.LoopWithoutBackward;
    bool Training = !Evaluation && C.Path.Grad != GradMode::Unknown &&
                    C.Loop.TrainingLoop.isValid();
    bool Undecided = !Evaluation && !Training &&
                     C.Path.Grad == GradMode::Entry && C.Loop.Loop.isInvalid();
    if (!Evaluation && !Training && !Undecided)
      return Verdict::Holds;
    if (isCallerEntry(Module.Mode) || Undecided)
      return Verdict::Callers;
    if (Evaluation)
      return Mode == ModuleMode::Train || Mode == ModuleMode::TrainOnSomePath
                 ? Verdict::Violated
                 : Verdict::Holds;
    return Mode == ModuleMode::Eval ? Verdict::Violated : Verdict::Holds;
  }
};

const ForwardInRightMode Instance;
const RequirementRegistration Registered(Instance);

} // namespace

EvalModeMissingCheck::EvalModeMissingCheck(StringRef Name,
                                           ClangTidyContext *Context)
    : ModelCheck(Name, Context),
      RawEvaluationFunctions(Options.get("EvaluationFunctions", "")) {
  Kind = &Instance;
}

void EvalModeMissingCheck::storeOptions(ClangTidyOptions::OptionMap &Opts) {
  Options.store(Opts, "EvaluationFunctions", RawEvaluationFunctions);
}

void EvalModeMissingCheck::report(const Violation &V, ProgramModel &Program) {
  const ASTContext &Ctx = Program.context();
  const Operand &Module = V.Match.Operands[0];
  const Stmt *Forward = V.Context.At ? V.Context.At : V.Site;
  bool Trains = Module.Facts.Mode.Value == ModuleMode::Eval;
  // A forward trains exactly when its output reaches backward(): a
  // decoding loop whose outputs make the loss evaluates nothing.
  if (Trains != (Program.graphsBackpropagated().contains(Forward) ||
                 (V.Match.Flags & RequirementMatch::Backpropagated)))
    return;
  // A callee of another TU's audit summary: at its forward all the same.
  SourceLocation Loc = V.FromCallee && !V.Context.At ? locationOf(V, true)
                                                     : Forward->getBeginLoc();
  if (!firstAt(Loc))
    return;
  std::string Name = nameOf(Module, Ctx, "the module");
  if (Trains) {
    diag(Loc, "module %0 is in evaluation mode where its output trains: its "
              "Dropout and BatchNorm layers run as in evaluation, so the "
              "gradients are those of another model; call train() before "
              "the training loop")
        << Name;
    noteFact(Module.Facts.Mode, Name, "%0 is put in evaluation mode here");
  } else {
    diag(Loc, "module %0 is evaluated in training mode: dropout stays on and "
              "BatchNorm normalises with the batch's statistics and updates "
              "its running ones, so the metrics are wrong; call eval() before "
              "evaluating")
        << Name;
    noteFact(Module.Facts.Mode, Name,
             Module.Facts.Mode.Value == ModuleMode::TrainOnSomePath
                 ? "%0 is left in training mode on a path from here"
                 : "%0 is in training mode from here");
  }
  if (V.FromCallee)
    diag(locationOf(V, /*InCallee=*/false), "called here", DiagnosticIDs::Note);
  // The fix (unsafe: it changes what runs): switch the mode before the loop
  // that evaluates, when the module is a variable there.
  SourceLocation Loop = V.Context.Loop.Loop;
  const auto *Var = dyn_cast<DeclRefExpr>(Module.Source->IgnoreParenImpCasts());
  if (Trains || V.FromCallee || Loop.isInvalid() || !Var || Loop.isMacroID())
    return;
  std::string Indent =
      Lexer::getIndentationForLine(Loop, Ctx.getSourceManager()).str();
  std::string Fix = Var->getDecl()->getName().str() +
                    moduleMemberAccess(Var->getType()).str() + "eval();\n" +
                    Indent;
  diag(Loop, "switch %0 to evaluation mode before this loop",
       DiagnosticIDs::Note)
      << Name << FixItHint::CreateInsertion(Loop, Fix);
}

} // namespace clang::tidy::torch
