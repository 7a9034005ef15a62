//===--- Autocast.cpp - torch-tidy ----------------------------------------===//

#include "Autocast.h"
#include "TorchMatchers.h"
#include "clang/AST/Decl.h"
#include "clang/AST/DeclCXX.h"

namespace clang::tidy::torch {

/// A free function of at::autocast, or null.
static const FunctionDecl *autocastFunction(const CallExpr &Call) {
  const FunctionDecl *FD = Call.getDirectCallee();
  if (!FD || !FD->getIdentifier())
    return nullptr;
  const auto *NS = dyn_cast<NamespaceDecl>(FD->getDeclContext());
  if (!NS || NS->getName() != "autocast")
    return nullptr;
  const auto *Outer = dyn_cast<NamespaceDecl>(NS->getDeclContext());
  return Outer && Outer->getName() == "at" ? FD : nullptr;
}

AutocastSwitch autocastSwitch(const CallExpr &Call) {
  AutocastSwitch S;
  const FunctionDecl *FD = autocastFunction(Call);
  if (!FD)
    return S;
  llvm::StringRef Name = FD->getName();
  unsigned Args = Call.getNumArgs();
  if (Name == "set_autocast_enabled" || Name == "set_autocast_dtype") {
    if (Args != 2)
      return S;
    S.What = Name == "set_autocast_enabled" ? AutocastSwitch::Enable
                                            : AutocastSwitch::Dtype;
    S.DeviceType = Call.getArg(0);
    S.Value = Call.getArg(1);
    return S;
  }
  if (Args != 1)
    return S;
  S.Value = Call.getArg(0);
  if (Name == "set_enabled") {
    S.What = AutocastSwitch::Enable;
    return S;
  }
  if (Name == "set_autocast_gpu_dtype") {
    S.What = AutocastSwitch::Dtype;
    return S;
  }
  // The per-backend 1.13 spellings: set_cpu_enabled, set_autocast_cpu_dtype.
  llvm::StringRef Backend = Name;
  if (Backend.consume_front("set_autocast_") && Backend.consume_back("_dtype")) {
    S.What = AutocastSwitch::Dtype;
    S.Backend = Backend;
    return S;
  }
  Backend = Name;
  if (Backend.consume_front("set_") && Backend.consume_back("_enabled") &&
      !Backend.starts_with("autocast")) {
    S.What = AutocastSwitch::Enable;
    S.Backend = Backend;
  }
  return S;
}

bool isAutocastQuery(const CallExpr &Call) {
  const FunctionDecl *FD = autocastFunction(Call);
  if (!FD)
    return false;
  llvm::StringRef Name = FD->getName();
  return Name == "is_enabled" || Name == "is_autocast_enabled" ||
         (Name.starts_with("is_") && Name.ends_with("_enabled") &&
          Name != "is_autocast_cache_enabled");
}

bool isAutocastGuard(const VarDecl &VD, const TorchApiOptions &Opts) {
  const CXXRecordDecl *RD = VD.getType()->getAsCXXRecordDecl();
  return RD && matchesNameList(*RD, Opts.AutocastGuardTypes);
}

std::optional<bool> namesHalf(const Expr *E) {
  E = stripConversions(E);
  const auto *Ref = E ? dyn_cast<DeclRefExpr>(E->IgnoreParenImpCasts()) : nullptr;
  if (!Ref)
    return std::nullopt;
  if (const auto *Enumerator = dyn_cast<EnumConstantDecl>(Ref->getDecl()))
    return Enumerator->getName() == "Half";
  // `at::kHalf`, `torch::kFloat16`: constants initialised from one.
  const auto *Var = dyn_cast<VarDecl>(Ref->getDecl());
  if (!Var || !Var->isConstexpr() || !Var->getInit() || Var->getInit() == E)
    return std::nullopt;
  return namesHalf(Var->getInit());
}

std::optional<bool> dtypeValueIsHalf(QualType T, int64_t Value) {
  if (!isDtypeType(T))
    return std::nullopt;
  for (const EnumConstantDecl *Enumerator :
       T.getNonReferenceType()->castAs<EnumType>()->getDecl()->enumerators())
    if (Enumerator->getInitVal() == Value)
      return Enumerator->getName() == "Half";
  return std::nullopt;
}

} // namespace clang::tidy::torch
