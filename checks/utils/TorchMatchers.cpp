//===--- TorchMatchers.cpp - torch-tidy -----------------------------------===//

#include "TorchMatchers.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/ParentMapContext.h"
#include "clang/AST/StmtCXX.h"

namespace clang::tidy::torch {

llvm::ArrayRef<llvm::StringRef> emptyCacheFunctionNames() {
  static const llvm::StringRef Names[] = {
      "::c10::cuda::CUDACachingAllocator::emptyCache",
      "::c10::cuda::emptyCache",
      "::at::accelerator::emptyCache",
      "::at::cuda::emptyCache",
      "::torch::cuda::empty_cache",
  };
  return Names;
}

static bool hasQualifiedRecordName(QualType T, llvm::StringRef Name) {
  T = T.getNonReferenceType().getCanonicalType();
  const auto *RD = T->getAsCXXRecordDecl();
  return RD && RD->getQualifiedNameAsString() == Name;
}

bool isTensorType(QualType T) { return hasQualifiedRecordName(T, "at::Tensor"); }
bool isDeviceType(QualType T) { return hasQualifiedRecordName(T, "c10::Device"); }
bool isTensorOptionsType(QualType T) {
  return hasQualifiedRecordName(T, "c10::TensorOptions");
}
bool isDeviceTypeEnum(QualType T) {
  T = T.getNonReferenceType().getCanonicalType();
  const auto *ET = T->getAs<EnumType>();
  return ET && ET->getDecl()->getQualifiedNameAsString() == "c10::DeviceType";
}

bool isRepeatedPartOfLoop(const Stmt &Loop, const Stmt &Child) {
  if (const auto *For = dyn_cast<ForStmt>(&Loop))
    return &Child == For->getBody() || &Child == For->getCond() ||
           &Child == For->getInc() ||
           (For->getConditionVariableDeclStmt() &&
            &Child == For->getConditionVariableDeclStmt());
  if (const auto *RangeFor = dyn_cast<CXXForRangeStmt>(&Loop))
    return &Child == RangeFor->getBody() ||
           &Child == RangeFor->getLoopVarStmt();
  if (const auto *While = dyn_cast<WhileStmt>(&Loop))
    return &Child == While->getBody() || &Child == While->getCond() ||
           (While->getConditionVariableDeclStmt() &&
            &Child == While->getConditionVariableDeclStmt());
  if (const auto *Do = dyn_cast<DoStmt>(&Loop))
    return &Child == Do->getBody() || &Child == Do->getCond();
  return false;
}

EnclosingLoop findEnclosingLoop(const Stmt &S, ASTContext &Ctx,
                                unsigned MaxDepth) {
  EnclosingLoop Result;
  const LambdaExpr *InnermostLambda = nullptr;
  DynTypedNode Child = DynTypedNode::create(S);
  for (unsigned Depth = 0; Depth < MaxDepth; ++Depth) {
    DynTypedNodeList Parents = Ctx.getParents(Child);
    if (Parents.empty())
      return Result;
    const DynTypedNode &Parent = Parents[0];
    if (const auto *ParentStmt = Parent.get<Stmt>()) {
      if (const auto *Lambda = dyn_cast<LambdaExpr>(ParentStmt)) {
        if (!InnermostLambda)
          InnermostLambda = Lambda;
      } else if (isa<ForStmt, CXXForRangeStmt, WhileStmt, DoStmt>(ParentStmt)) {
        const auto *ChildStmt = Child.get<Stmt>();
        if (ChildStmt && isRepeatedPartOfLoop(*ParentStmt, *ChildStmt)) {
          Result.Loop = ParentStmt;
          Result.ViaLambda = InnermostLambda;
          return Result;
        }
      }
    } else if (const auto *Method = Parent.get<CXXMethodDecl>()) {
      // A lambda's call operator: continue at the lambda expression.
      const CXXRecordDecl *Class = Method->getParent();
      if (!Class || !Class->isLambda())
        return Result;
      DynTypedNodeList ClassParents = Ctx.getParents(*Class);
      const LambdaExpr *Lambda =
          ClassParents.empty() ? nullptr : ClassParents[0].get<LambdaExpr>();
      if (!Lambda)
        return Result;
      if (!InnermostLambda)
        InnermostLambda = Lambda;
      Child = DynTypedNode::create(*static_cast<const Stmt *>(Lambda));
      continue;
    } else if (Parent.get<Decl>() && !Parent.get<VarDecl>() &&
               !Parent.get<DecompositionDecl>()) {
      // Any other declaration (a function, a class) ends the search.
      return Result;
    }
    Child = Parent;
  }
  return Result;
}

} // namespace clang::tidy::torch
