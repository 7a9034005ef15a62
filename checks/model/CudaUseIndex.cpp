//===--- CudaUseIndex.cpp - torch-tidy ------------------------------------===//

#include "CudaUseIndex.h"
#include "CudaAvailabilityGuard.h"
#include "CudaDeviceLiterals.h"
#include "model/UserCodeParents.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/Basic/SourceManager.h"
#include <optional>

namespace clang::tidy::torch::cuda_guard {

void forEachStmt(const Stmt *S, const std::function<void(const Stmt &)> &Fn) {
  if (!S)
    return;
  Fn(*S);
  if (const auto *L = dyn_cast<LambdaExpr>(S)) {
    for (const Expr *Init : L->capture_inits())
      forEachStmt(Init, Fn);
    return;
  }
  for (const Stmt *Child : S->children())
    forEachStmt(Child, Fn);
}

namespace {

/// Walks the TU's user code (template instantiations included, system
/// headers skipped) and keeps a stack of the code being walked.
class Collector : public RecursiveASTVisitor<Collector> {
  using Base = RecursiveASTVisitor<Collector>;

public:
  Collector(const SourceManager &SM, TUIndex &Index) : SM(SM), Index(Index) {}
  bool shouldVisitTemplateInstantiations() const { return true; }
  bool shouldVisitImplicitCode() const { return false; }

  bool TraverseDecl(Decl *D) {
    if (!D)
      return true;
    if (isSystemHeaderDecl(*D, SM))
      return true;
    std::optional<RootKey> K;
    if (auto *FD = dyn_cast<FunctionDecl>(D)) {
      if (FD->doesThisDeclarationHaveABody() && FD->getBody())
        K = RootKey{RootKind::Function, FD, nullptr, FD->getBody()};
    } else if (auto *VD = dyn_cast<VarDecl>(D)) {
      if (!isa<ParmVarDecl>(VD) && !VD->isLocalVarDecl() && VD->getInit())
        K = RootKey{RootKind::GlobalInit, VD, nullptr,
                    const_cast<Expr *>(VD->getInit())};
    } else if (auto *FD = dyn_cast<FieldDecl>(D)) {
      if (Expr *Init = FD->getInClassInitializer())
        K = RootKey{RootKind::FieldInit, FD, nullptr, Init};
    }
    if (K)
      Stack.push_back(*K);
    bool Continue = Base::TraverseDecl(D);
    if (K)
      Stack.pop_back();
    return Continue;
  }

  bool TraverseLambdaExpr(LambdaExpr *L) {
    if (!Stack.empty())
      Index.LambdaPositions[L].push_back(Stack.back());
    Stack.push_back(
        RootKey{RootKind::Lambda, L->getCallOperator(), L, L->getBody()});
    bool Continue = Base::TraverseLambdaExpr(L);
    Stack.pop_back();
    return Continue;
  }

  bool VisitDeclRefExpr(DeclRefExpr *E) {
    addRef(E->getDecl(), E);
    if (classifyDeviceLiteral(*E) == DeviceLiteralKind::CUDA)
      addCandidate(E);
    return true;
  }
  bool VisitStringLiteral(StringLiteral *E) {
    if (classifyDeviceLiteral(*E) == DeviceLiteralKind::CUDA)
      addCandidate(E);
    return true;
  }
  bool VisitMemberExpr(MemberExpr *E) {
    addRef(E->getMemberDecl(), E);
    return true;
  }
  bool VisitCXXMemberCallExpr(CXXMemberCallExpr *E) {
    if (isTensorCudaCall(*E))
      addCandidate(E);
    return true;
  }
  bool VisitCXXConstructExpr(CXXConstructExpr *E) {
    const CXXConstructorDecl *Ctor = E->getConstructor();
    addRef(Ctor, E);
    addConstruction(Ctor->getParent(), E);
    return true;
  }
  bool VisitCallExpr(CallExpr *E) {
    // std::make_shared<Net>(...), std::make_unique<Net>(...).
    const FunctionDecl *FD = E->getDirectCallee();
    if (!FD || !FD->getDeclName().isIdentifier())
      return true;
    llvm::StringRef Name = FD->getName();
    if (Name != "make_shared" && Name != "make_unique" &&
        Name != "allocate_shared")
      return true;
    if (const TemplateArgumentList *Args = FD->getTemplateSpecializationArgs())
      if (Args->size() >= 1 && Args->get(0).getKind() == TemplateArgument::Type)
        addConstruction(recordOf(Args->get(0).getAsType()), E);
    return true;
  }
  bool VisitCXXConstructorDecl(CXXConstructorDecl *D) {
    for (const CXXCtorInitializer *Init : D->inits())
      if (Init->isWritten() && Init->getMember() && Init->getInit())
        Index.FieldInits[Init->getMember()].push_back(Init->getInit());
    return true;
  }

private:
  void addRef(const Decl *D, const Expr *E) {
    if (!Stack.empty())
      Index.Refs[D->getCanonicalDecl()].push_back({E, Stack.back()});
  }
  void addCandidate(const Expr *E) {
    if (!Stack.empty())
      Index.Candidates.push_back({E, Stack.back()});
  }
  void addConstruction(const CXXRecordDecl *RD, const Expr *E) {
    if (!RD || Stack.empty())
      return;
    RD = RD->getCanonicalDecl();
    Index.Constructions[RD].push_back({E, Stack.back()});
    // A TORCH_MODULE holder constructs its `Impl` inside the (system) header.
    if (!RD->hasDefinition())
      return;
    for (const CXXBaseSpecifier &Base : RD->getDefinition()->bases()) {
      const auto *Spec = dyn_cast_or_null<ClassTemplateSpecializationDecl>(
          recordOf(Base.getType()));
      if (!Spec ||
          Spec->getQualifiedNameAsString() != "torch::nn::ModuleHolder")
        continue;
      const TemplateArgumentList &Args = Spec->getTemplateArgs();
      if (Args.size() == 1 && Args[0].getKind() == TemplateArgument::Type)
        if (const CXXRecordDecl *Impl = recordOf(Args[0].getAsType()))
          Index.Constructions[Impl->getCanonicalDecl()].push_back(
              {E, Stack.back()});
    }
  }

  const SourceManager &SM;
  TUIndex &Index;
  std::vector<RootKey> Stack;
};

} // namespace

std::unique_ptr<TUIndex> indexUserCode(ASTContext &Ctx) {
  auto Index = std::make_unique<TUIndex>();
  Collector(Ctx.getSourceManager(), *Index)
      .TraverseDecl(Ctx.getTranslationUnitDecl());
  return Index;
}

} // namespace clang::tidy::torch::cuda_guard
