//===--- TorchMatchers.cpp - torch-tidy -----------------------------------===//

#include "api/TorchMatchers.h"
#include "support/UserCodeParents.h"
#include "api/TorchApi.h"
#include "clang-tidy/utils/OptionsUtils.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/StmtCXX.h"
#include "clang/Lex/Lexer.h"

namespace clang::tidy::torch {

std::vector<std::string> parseNameList(StringRef Option) {
  std::vector<std::string> Names;
  for (StringRef Name : utils::options::parseStringList(Option)) {
    Name = Name.trim();
    if (!Name.empty())
      Names.push_back(Name.str());
  }
  return Names;
}

bool matchesNameList(const NamedDecl &D, llvm::ArrayRef<std::string> Names) {
  if (Names.empty() || !D.getIdentifier())
    return false;
  std::string Qualified = D.getQualifiedNameAsString();
  for (StringRef N : Names) {
    N = N.trim();
    if (N.contains("::")) {
      N.consume_front("::");
      if (N == Qualified)
        return true;
    } else if (!N.empty() && N == D.getName()) {
      return true;
    }
  }
  return false;
}

std::string quotedSource(const Expr *E, const ASTContext &Ctx,
                         StringRef Fallback, size_t MaxLength) {
  if (!E)
    return Fallback.str();
  E = stripConversions(E);
  // `j->to(...)`: the object is `j.operator->()`, spelled `j->`; it is `*j`.
  std::string Prefix;
  if (const auto *Arrow = dyn_cast<CXXOperatorCallExpr>(E);
      Arrow && Arrow->getOperator() == OO_Arrow && Arrow->getNumArgs() == 1) {
    Prefix = "*";
    E = stripConversions(Arrow->getArg(0));
  }
  StringRef Text = Lexer::getSourceText(
      CharSourceRange::getTokenRange(E->getSourceRange()),
      Ctx.getSourceManager(), Ctx.getLangOpts());
  if (Text.empty() || Text.size() + Prefix.size() > MaxLength ||
      Text.contains('\n'))
    return Fallback.str();
  return ("'" + Prefix + Text + "'").str();
}

llvm::ArrayRef<llvm::StringRef> emptyCacheFunctionNames() {
  static const llvm::StringRef Names[] = {
      "::c10::cuda::CUDACachingAllocator::emptyCache",
      // 2.x: get()->emptyCache(), which the free function forwards to.
      "::c10::cuda::CUDACachingAllocator::CUDAAllocator::emptyCache",
      "::c10::cuda::emptyCache",
      "::at::accelerator::emptyCache",
      "::at::cuda::emptyCache",
      "::torch::cuda::empty_cache",
  };
  return Names;
}

llvm::ArrayRef<llvm::StringRef> tensorConversionMethodNames() {
  // `type()` is not here: it returns the tensor's type properties, not a copy.
  static const llvm::StringRef Names[] = {
      "to",         "cuda",   "cpu",   "hip",    "pin_memory",
      "contiguous", "detach", "clone", "toType", "toBackend",
  };
  return Names;
}

llvm::ArrayRef<llvm::StringRef> deviceCountFunctionNames() {
  static const llvm::StringRef Names[] = {
      "::torch::cuda::device_count",
      "::c10::cuda::device_count",
      "::c10::cuda::device_count_ensure_non_zero",
      "::at::cuda::getNumGPUs",
      "::at::getNumGPUs",
      "::at::accelerator::deviceCount", // 2.7+
  };
  return Names;
}

static bool hasQualifiedRecordName(QualType T, llvm::StringRef Name) {
  if (T.isNull()) // an expression clang could not type (invalid code)
    return false;
  T = T.getNonReferenceType().getCanonicalType();
  const auto *RD = T->getAsCXXRecordDecl();
  return RD && RD->getQualifiedNameAsString() == Name;
}

bool isTensorType(QualType T) { return hasQualifiedRecordName(T, "at::Tensor"); }
bool isTensorArrayType(QualType T) {
  return !T.isNull() && T->isConstantArrayType() &&
         isTensorType(QualType(T->getBaseElementTypeUnsafe(), 0));
}
bool isDeviceType(QualType T) { return hasQualifiedRecordName(T, "c10::Device"); }
bool isTensorOptionsType(QualType T) {
  return hasQualifiedRecordName(T, "c10::TensorOptions");
}
bool isScriptValueType(QualType T) {
  if (T.isNull())
    return false;
  T = T.getNonReferenceType().getCanonicalType();
  const auto *RD = T->getAsCXXRecordDecl();
  if (!RD)
    return false;
  if (const auto *Spec = dyn_cast<ClassTemplateSpecializationDecl>(RD);
      Spec && Spec->getQualifiedNameAsString() == "c10::intrusive_ptr" &&
      Spec->getTemplateArgs().size() >= 1 &&
      Spec->getTemplateArgs()[0].getKind() == TemplateArgument::Type)
    return isScriptValueType(Spec->getTemplateArgs()[0].getAsType());
  if (RD->getQualifiedNameAsString() == "c10::IValue")
    return true;
  const auto *NS = dyn_cast<NamespaceDecl>(RD->getDeclContext());
  return NS && NS->getQualifiedNameAsString() == "c10::ivalue";
}
bool isDeviceTypeEnum(QualType T) {
  T = T.getNonReferenceType().getCanonicalType();
  const auto *ET = T->getAs<EnumType>();
  return ET && ET->getDecl()->getQualifiedNameAsString() == "c10::DeviceType";
}

bool isRunAsStatement(const Stmt &Parent, const Stmt &Child, ASTContext &Ctx) {
  if (const auto *Compound = dyn_cast<CompoundStmt>(&Parent)) {
    // The last statement of a GNU statement expression is its value.
    llvm::ArrayRef<DynTypedNode> Grand = userCodeParents(*Compound, Ctx);
    return Grand.empty() || !Grand[0].get<StmtExpr>() ||
           Compound->body_back() != &Child;
  }
  if (const auto *If = dyn_cast<IfStmt>(&Parent))
    return &Child == If->getThen() || &Child == If->getElse();
  if (const auto *For = dyn_cast<ForStmt>(&Parent))
    return &Child == For->getBody() || &Child == For->getInit() ||
           &Child == For->getInc();
  if (const auto *While = dyn_cast<WhileStmt>(&Parent))
    return &Child == While->getBody();
  if (const auto *Do = dyn_cast<DoStmt>(&Parent))
    return &Child == Do->getBody();
  if (const auto *RangeFor = dyn_cast<CXXForRangeStmt>(&Parent))
    return &Child == RangeFor->getBody();
  if (const auto *Case = dyn_cast<SwitchCase>(&Parent))
    return &Child == Case->getSubStmt();
  return isa<LabelStmt, AttributedStmt>(&Parent);
}

bool hasSpelledArgument(const CallExpr &Call) {
  return llvm::any_of(Call.arguments(), [](const Expr *Arg) {
    return !isa<CXXDefaultArgExpr>(Arg);
  });
}

const Expr *discardedFullExpression(const Expr &E, ASTContext &Ctx) {
  const Expr *Current = &E;
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

} // namespace clang::tidy::torch
