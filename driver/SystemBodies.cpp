//===--- SystemBodies.cpp - torch-tidy driver -----------------------------===//

#include "SystemBodies.h"

#include "support/UserCodeParents.h"
#include "clang/AST/ASTContext.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Frontend/MultiplexConsumer.h"

using namespace clang;

namespace torchtidy {
namespace {

/// torch::nn::<Name>.
bool isTorchNN(const CXXRecordDecl &RD, StringRef Name) {
  if (!RD.getIdentifier() || RD.getName() != Name)
    return false;
  const auto *NN = dyn_cast<NamespaceDecl>(RD.getDeclContext());
  const auto *Torch = NN ? dyn_cast<NamespaceDecl>(NN->getDeclContext()) : nullptr;
  return NN && Torch && NN->getIdentifier() && NN->getName() == "nn" &&
         Torch->getIdentifier() && Torch->getName() == "torch" &&
         Torch->getDeclContext()->isTranslationUnit();
}

/// Whether \p RD is torch::nn::Module or may derive from it: constructors
/// of module classes are read by the tensor model (constructorMovesModule()
/// in checks/analysis/TensorTransfer.cpp). A base that is a template
/// parameter may be anything.
bool mayDeriveFromModule(const CXXRecordDecl *RD, unsigned Depth = 0) {
  if (!RD || Depth > 32)
    return true;
  if (isTorchNN(*RD, "Module"))
    return true;
  if (!(RD = RD->getDefinition()))
    return false;
  for (const CXXBaseSpecifier &Base : RD->bases()) {
    QualType Type = Base.getType();
    const CXXRecordDecl *Next = Type->getAsCXXRecordDecl();
    if (!Next)
      if (const auto *Spec = Type->getAs<TemplateSpecializationType>())
        if (const auto *Template = dyn_cast_or_null<ClassTemplateDecl>(
                Spec->getTemplateName().getAsTemplateDecl()))
          Next = Template->getTemplatedDecl();
    if (!Next || mayDeriveFromModule(Next, Depth + 1))
      return true;
  }
  return false;
}

/// ExprMutationAnalyzer::findFunctionArgMutation follows an argument into
/// the body of a function template whose parameter is `T&&` (or `T&&...`)
/// with T a template parameter, at any depth.
bool hasForwardingReferenceParameter(const FunctionDecl &FD) {
  if (!FD.getDescribedFunctionTemplate())
    return false;
  for (const ParmVarDecl *Param : FD.parameters()) {
    QualType Type = Param->getType();
    if (const auto *Pack = Type->getAs<PackExpansionType>())
      Type = Pack->getPattern();
    if (const auto *Ref = Type->getAs<RValueReferenceType>())
      if (!Ref->getPointeeType().getQualifiers() &&
          Ref->getPointeeType()->getAs<TemplateTypeParmType>())
        return true;
  }
  return false;
}

/// A function template that takes a template parameter by value, as the
/// standard algorithms take their callables: a generic lambda of the user's
/// handed to it is instantiated only through its body.
bool hasByValueTemplateParameter(const FunctionDecl &FD) {
  if (!FD.getDescribedFunctionTemplate())
    return false;
  for (const ParmVarDecl *Param : FD.parameters())
    if (Param->getType()->getAs<TemplateTypeParmType>())
      return true;
  return false;
}

class SkipSystemBodiesConsumer : public MultiplexConsumer {
public:
  explicit SkipSystemBodiesConsumer(std::vector<std::unique_ptr<ASTConsumer>> C)
      : MultiplexConsumer(std::move(C)) {}
  bool shouldSkipFunctionBody(Decl *D) override {
    return D && skippableSystemBody(*D) &&
           MultiplexConsumer::shouldSkipFunctionBody(D);
  }
};

} // namespace

bool skippableSystemBody(const Decl &D) {
  const FunctionDecl *FD = D.getAsFunction();
  if (!FD || !tidy::torch::isSystemHeaderDecl(
                 D, D.getASTContext().getSourceManager()))
    return false;
  if (hasForwardingReferenceParameter(*FD) || hasByValueTemplateParameter(*FD))
    return false;
  // A module constructed in user code through a holder (TORCH_MODULE) has
  // its constructor instantiated by the holder's members.
  if (const auto *Method = dyn_cast<CXXMethodDecl>(FD))
    if (isTorchNN(*Method->getParent(), "ModuleHolder"))
      return false;
  if (const auto *Ctor = dyn_cast<CXXConstructorDecl>(FD))
    return !mayDeriveFromModule(Ctor->getParent());
  // The interprocedural model summarises user code only: a call into any
  // system header, LibTorch's or a third party's, is opaque to it.
  return true;
}

std::unique_ptr<ASTConsumer>
skipSystemBodies(std::unique_ptr<ASTConsumer> Inner) {
  std::vector<std::unique_ptr<ASTConsumer>> Consumers;
  Consumers.push_back(std::move(Inner));
  return std::make_unique<SkipSystemBodiesConsumer>(std::move(Consumers));
}

void enableBodySkipping(CompilerInvocation &Invocation) {
  Invocation.getFrontendOpts().SkipFunctionBodies = true;
}

} // namespace torchtidy
