//===--- GradMode.cpp - torch-tidy ----------------------------------------===//

#include "GradMode.h"
#include "api/TorchMatchers.h"
#include "UserCodeParents.h"
#include "model/ProgramModel.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "llvm/ADT/STLExtras.h"

namespace clang::tidy::torch {

/// The constant value of a bool argument; nullopt when not constant.
static std::optional<bool> constantBool(const Expr *E, const ASTContext &Ctx) {
  bool Value = false;
  if (!E || E->isValueDependent() || !E->EvaluateAsBooleanCondition(Value, Ctx))
    return std::nullopt;
  return Value;
}

GuardEffect guardEffect(const VarDecl &VD, const ASTContext &Ctx,
                        const std::vector<std::string> &ExtraGuardTypes) {
  if (VD.getType()->isReferenceType() || VD.getType()->isPointerType())
    return GuardEffect::None;
  const CXXRecordDecl *RD = VD.getType()->getAsCXXRecordDecl();
  if (!RD)
    return GuardEffect::None;
  if (matchesNameList(*RD, ExtraGuardTypes))
    return GuardEffect::Disables;
  std::string N = RD->getQualifiedNameAsString();
  bool NoGrad = N == "c10::NoGradGuard" || N == "at::NoGradGuard";
  bool Inference = N == "c10::InferenceMode";
  bool AutoGrad = N == "c10::AutoGradMode" || N == "at::AutoGradMode";
  if (!NoGrad && !Inference && !AutoGrad)
    return GuardEffect::None;
  if (NoGrad)
    return GuardEffect::Disables;
  const Expr *Init = VD.getInit() ? VD.getInit()->IgnoreImplicit() : nullptr;
  const auto *Construct = dyn_cast_or_null<CXXConstructExpr>(Init);
  if (!Construct)
    return GuardEffect::Unknown;
  const Expr *Arg = Construct->getNumArgs() > 0 &&
                            !isa<CXXDefaultArgExpr>(Construct->getArg(0))
                        ? Construct->getArg(0)
                        : nullptr;
  std::optional<bool> Value = constantBool(Arg, Ctx);
  if (Inference) {
    if (!Arg || Value == true)
      return GuardEffect::Disables;
    // InferenceMode(false) leaves grad mode as it was.
    return Value == false ? GuardEffect::None : GuardEffect::Unknown;
  }
  if (!Value)
    return GuardEffect::Unknown;
  return *Value ? GuardEffect::Enables : GuardEffect::Disables;
}

/// `c10::GradMode::set_enabled(...)` calls anywhere in \p S.
static const CallExpr *findSetEnabled(const Stmt *S) {
  if (!S)
    return nullptr;
  if (const auto *Call = dyn_cast<CallExpr>(S))
    if (const FunctionDecl *FD = Call->getDirectCallee())
      if (FD->getQualifiedNameAsString() == "c10::GradMode::set_enabled")
        return Call;
  for (const Stmt *Child : S->children())
    if (const CallExpr *Found = findSetEnabled(Child))
      return Found;
  return nullptr;
}

/// What the statements of \p CS before \p Child do to grad mode, the
/// closest one first; nullopt when none does anything.
static std::optional<GradModeAt>
effectBefore(const CompoundStmt &CS, const Stmt *Child, const ASTContext &Ctx,
             const std::vector<std::string> &ExtraGuardTypes) {
  auto Body = CS.body();
  auto It = llvm::find(Body, Child);
  while (It != Body.begin()) {
    --It;
    const Stmt *Prev = *It;
    if (const auto *DS = dyn_cast<DeclStmt>(Prev)) {
      llvm::SmallVector<const Decl *, 2> Decls(DS->decls());
      for (const Decl *D : llvm::reverse(Decls)) {
        const auto *VD = dyn_cast<VarDecl>(D);
        if (!VD)
          continue;
        switch (guardEffect(*VD, Ctx, ExtraGuardTypes)) {
        case GuardEffect::Disables:
          return GradModeAt::Disabled;
        case GuardEffect::Enables:
          return GradModeAt::Enabled;
        case GuardEffect::Unknown:
          return GradModeAt::Unknown;
        case GuardEffect::None:
          break;
        }
      }
    }
    if (const CallExpr *Set = findSetEnabled(Prev)) {
      // A top-level set_enabled(constant) decides; anything else does not.
      const Expr *Top = dyn_cast<Expr>(Prev);
      if (Top && Top->IgnoreImplicit() == Set && Set->getNumArgs() == 1)
        if (std::optional<bool> V = constantBool(Set->getArg(0), Ctx))
          return *V ? GradModeAt::Enabled : GradModeAt::Disabled;
      return GradModeAt::Unknown;
    }
  }
  return std::nullopt;
}

GradModeOracle::GradModeOracle(ProgramModel &Program,
                               std::vector<std::string> ExtraGuardTypes,
                               unsigned CallerDepth)
    : Program(Program), Ctx(Program.context()),
      ExtraGuardTypes(std::move(ExtraGuardTypes)), CallerDepth(CallerDepth) {}

GradModeAt GradModeOracle::at(const Stmt &S) { return at(S, CallerDepth); }

GradModeAt GradModeOracle::at(const Stmt &S, unsigned Depth) {
  DynTypedNode Child = DynTypedNode::create(S);
  for (unsigned Steps = 0; Steps < 1024; ++Steps) {
    llvm::ArrayRef<DynTypedNode> Parents = userCodeParents(Child, Ctx);
    if (Parents.empty())
      return GradModeAt::Unknown;
    const DynTypedNode &Parent = Parents[0];
    if (const auto *CS = Parent.get<CompoundStmt>()) {
      if (std::optional<GradModeAt> Effect =
              effectBefore(*CS, Child.get<Stmt>(), Ctx, ExtraGuardTypes))
        return *Effect;
    }
    const LambdaExpr *Lambda = Parent.get<LambdaExpr>();
    if (const auto *Method = Parent.get<CXXMethodDecl>()) {
      const CXXRecordDecl *Class = Method->getParent();
      if (!Class || !Class->isLambda())
        return callersOf(*Method, Depth);
      llvm::ArrayRef<DynTypedNode> ClassParents = userCodeParents(*Class, Ctx);
      Lambda =
          ClassParents.empty() ? nullptr : ClassParents[0].get<LambdaExpr>();
      if (!Lambda)
        return GradModeAt::Unknown;
    }
    if (Lambda) {
      // Leaving a lambda body: a guarded call of the lambda counts, and so
      // does a guard around its definition (checked as the walk goes on).
      if (const CXXMethodDecl *Op = Lambda->getCallOperator()) {
        GradModeAt Callers = callersOf(*Op, Depth);
        if (Callers != GradModeAt::Enabled)
          return Callers;
      }
      Child = DynTypedNode::create(*static_cast<const Stmt *>(Lambda));
      continue;
    }
    if (const auto *FD = Parent.get<FunctionDecl>())
      return callersOf(*FD, Depth);
    if (Parent.get<Decl>() && !Parent.get<VarDecl>() &&
        !Parent.get<DecompositionDecl>())
      return GradModeAt::Unknown;
    Child = Parent;
  }
  return GradModeAt::Unknown;
}

static void
collectOverridden(const CXXMethodDecl &MD,
                  llvm::SmallVectorImpl<const FunctionDecl *> &Out) {
  for (const CXXMethodDecl *O : MD.overridden_methods()) {
    Out.push_back(O->getCanonicalDecl());
    collectOverridden(*O, Out);
  }
}

GradModeAt GradModeOracle::callersOf(const FunctionDecl &FD, unsigned Depth) {
  const FunctionDecl *Canonical = FD.getCanonicalDecl();
  if (llvm::is_contained(InProgress, Canonical))
    return GradModeAt::Enabled; // a recursive call: the other callers decide
  if (Depth == 0)
    return GradModeAt::Unknown;
  llvm::SmallVector<const FunctionDecl *, 4> Targets = {Canonical};
  if (const auto *MD = dyn_cast<CXXMethodDecl>(Canonical))
    collectOverridden(*MD, Targets);
  const bool IsLambda = isa<CXXMethodDecl>(Canonical) &&
                        cast<CXXMethodDecl>(Canonical)->getParent()->isLambda();
  llvm::SmallVector<const Expr *, 4> Calls;
  for (const FunctionDecl *T : Targets) {
    // The function's address escapes: calls the analysis cannot see.
    if (!IsLambda && Program.isAddressTaken(*T))
      return GradModeAt::Unknown;
    for (const CallSite &Site : Program.callSitesOf(*T))
      Calls.push_back(Site.Call);
  }
  // Callers in other TUs, as an earlier audit saw them.
  if (std::optional<EntryContext> Entry = Program.entryContext(FD);
      Calls.empty() && Entry && Entry->GradDisabled)
    return GradModeAt::Disabled;
  InProgress.push_back(Canonical);
  bool SawUnknown = false;
  GradModeAt Result = GradModeAt::Enabled;
  for (const Expr *Call : Calls) {
    GradModeAt AtCall = at(*Call, Depth - 1);
    if (AtCall == GradModeAt::Disabled) {
      Result = GradModeAt::Disabled;
      break;
    }
    SawUnknown |= AtCall == GradModeAt::Unknown;
  }
  InProgress.pop_back();
  if (Result == GradModeAt::Disabled)
    return Result;
  return SawUnknown ? GradModeAt::Unknown : GradModeAt::Enabled;
}

} // namespace clang::tidy::torch
