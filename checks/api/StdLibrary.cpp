//===--- StdLibrary.cpp - torch-tidy --------------------------------------===//

#include "StdLibrary.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include "llvm/ADT/StringSwitch.h"

namespace clang::tidy::torch {

bool isStdClass(const CXXRecordDecl *RD, llvm::StringRef Name) {
  return RD && RD->isInStdNamespace() && RD->getIdentifier() &&
         RD->getName() == Name;
}

static bool isContainerName(llvm::StringRef N) {
  return llvm::StringSwitch<bool>(N)
      .Cases("vector", "deque", "array", "list", "forward_list", true)
      .Cases("map", "unordered_map", "multimap", "unordered_multimap", true)
      .Cases("set", "unordered_set", "queue", "stack", true)
      .Cases("optional", "variant", true) // at most one element
      .Default(false);
}

const CXXRecordDecl *containerRecord(QualType T) {
  if (T.isNull())
    return nullptr;
  T = T.getNonReferenceType().getCanonicalType();
  const CXXRecordDecl *RD = T->getAsCXXRecordDecl();
  if (!RD || !RD->isInStdNamespace() || !RD->getIdentifier() ||
      !isContainerName(RD->getName()))
    return nullptr;
  return RD;
}

const CXXRecordDecl *operandContainerRecord(QualType T) {
  const CXXRecordDecl *RD = containerRecord(T);
  const auto *Spec = dyn_cast_or_null<ClassTemplateSpecializationDecl>(RD);
  if (Spec && Spec->getTemplateArgs().size() > 0) {
    const TemplateArgument &Element = Spec->getTemplateArgs()[0];
    if (Element.getKind() == TemplateArgument::Type &&
        Element.getAsType()->isArithmeticType())
      return nullptr;
  }
  return RD;
}

bool isOptional(QualType T) {
  const CXXRecordDecl *RD = containerRecord(T);
  return isStdClass(RD, "optional") || isStdClass(RD, "variant");
}

static const CXXRecordDecl *owningPointerRecord(QualType T) {
  if (T.isNull())
    return nullptr;
  const CXXRecordDecl *RD =
      T.getNonReferenceType().getCanonicalType()->getAsCXXRecordDecl();
  return isStdClass(RD, "unique_ptr") || isStdClass(RD, "shared_ptr") ? RD
                                                                       : nullptr;
}

QualType ownedType(QualType OwningPointer) {
  const auto *Spec = dyn_cast_or_null<ClassTemplateSpecializationDecl>(
      owningPointerRecord(OwningPointer));
  if (!Spec || Spec->getTemplateArgs().size() < 1 ||
      Spec->getTemplateArgs()[0].getKind() != TemplateArgument::Type)
    return QualType();
  return Spec->getTemplateArgs()[0].getAsType();
}

bool isOwningPointer(QualType T) {
  QualType Owned = ownedType(T);
  return !Owned.isNull() && !Owned->isArrayType();
}

const FieldDecl *mappedField(QualType MapType) {
  const CXXRecordDecl *RD = containerRecord(MapType);
  if (!RD || !isMapContainer(RD))
    return nullptr;
  for (const Decl *D : RD->decls())
    if (const auto *TD = dyn_cast<TypedefNameDecl>(D))
      if (TD->getName() == "value_type")
        if (const CXXRecordDecl *Pair =
                TD->getUnderlyingType()->getAsCXXRecordDecl())
          for (const FieldDecl *F : Pair->fields())
            if (F->getName() == "second")
              return F;
  return nullptr;
}

const CXXRecordDecl *containerValueRecord(QualType ContainerType) {
  const CXXRecordDecl *RD = containerRecord(ContainerType);
  if (!RD)
    return nullptr;
  for (const Decl *D : RD->decls())
    if (const auto *TD = dyn_cast<TypedefNameDecl>(D))
      if (TD->getName() == "value_type")
        return TD->getUnderlyingType()->getAsCXXRecordDecl();
  return nullptr;
}

bool isMapContainer(const CXXRecordDecl *RD) {
  return RD && RD->getIdentifier() &&
         (RD->getName() == "map" || RD->getName() == "unordered_map" ||
          RD->getName() == "multimap" || RD->getName() == "unordered_multimap");
}

bool isTupleLike(QualType T) {
  if (T.isNull())
    return false;
  const CXXRecordDecl *RD =
      T.getNonReferenceType().getCanonicalType()->getAsCXXRecordDecl();
  return isStdClass(RD, "pair") || isStdClass(RD, "tuple");
}

/// A standard library iterator type (or a pointer, an array's iterator).
static bool isIteratorType(QualType T) {
  T = T.getNonReferenceType().getCanonicalType();
  if (T->isPointerType())
    return true;
  const CXXRecordDecl *RD = T->getAsCXXRecordDecl();
  return RD && RD->getIdentifier() &&
         RD->getName().contains_insensitive("iterator");
}

/// The iterator that \p E offsets (`it + n`, `std::next(it, n)`), else E.
static const Expr *offsetIterator(const Expr *E) {
  if (!isIteratorType(E->getType()))
    return E;
  if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E);
      Op && Op->getNumArgs() == 2 &&
      (Op->getOperator() == OO_Plus || Op->getOperator() == OO_Minus))
    return Op->getArg(0)->IgnoreImplicit();
  if (const auto *Call = dyn_cast<CallExpr>(E))
    if (const FunctionDecl *FD = Call->getDirectCallee();
        FD && FD->isInStdNamespace() && FD->getIdentifier() &&
        (FD->getName() == "next" || FD->getName() == "prev") &&
        Call->getNumArgs() >= 1)
      return Call->getArg(0)->IgnoreImplicit();
  return E;
}

const Expr *iteratedContainer(const Expr &Init) {
  const Expr *E = Init.IgnoreImplicit();
  // A built-in array decayed to a pointer to its first element.
  if (E->getType()->isConstantArrayType())
    return E;
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(E);
      Construct && Construct->getNumArgs() == 1)
    E = Construct->getArg(0)->IgnoreImplicit();
  // A copy of another local iterator, or an offset from one (`auto j = it;`,
  // `it + n`): the container it walks, as its initialiser says.
  E = offsetIterator(E);
  if (const auto *Copy = dyn_cast<CXXConstructExpr>(E);
      Copy && Copy->getNumArgs() == 1)
    E = Copy->getArg(0)->IgnoreImplicit();
  if (const auto *Ref = dyn_cast<DeclRefExpr>(E))
    if (const auto *Var = dyn_cast<VarDecl>(Ref->getDecl());
        Var && Var->hasLocalStorage() && !isa<ParmVarDecl>(Var) &&
        !Var->getType()->isReferenceType() && Var->getInit() &&
        Var->getInit()->IgnoreImplicit() != &Init)
      if (isIteratorType(Var->getType()))
        return iteratedContainer(*Var->getInit());
  // `m.try_emplace(k, v).first`, `s.insert(x).first`: the element's place.
  if (const auto *First = dyn_cast<MemberExpr>(E);
      First && First->getMemberDecl()->getIdentifier() &&
      First->getMemberDecl()->getName() == "first")
    if (const auto *Insert = dyn_cast<CXXMemberCallExpr>(
            First->getBase()->IgnoreImplicit()))
      if (const CXXMethodDecl *MD = Insert->getMethodDecl();
          MD && MD->getIdentifier() &&
          containerRecord(MD->getThisType()->getPointeeType()) &&
          (MD->getName() == "try_emplace" || MD->getName() == "emplace" ||
           MD->getName() == "insert" || MD->getName() == "insert_or_assign"))
        return Insert->getImplicitObjectArgument();
  if (const auto *Member = dyn_cast<CXXMemberCallExpr>(E)) {
    const CXXMethodDecl *MD = Member->getMethodDecl();
    if (!MD || !MD->getIdentifier() ||
        !containerRecord(MD->getThisType()->getPointeeType()))
      return nullptr;
    llvm::StringRef N = MD->getName();
    if (N == "begin" || N == "cbegin" || N == "rbegin" || N == "crbegin" ||
        N == "find" || N == "lower_bound")
      return Member->getImplicitObjectArgument();
    return nullptr;
  }
  if (const auto *Call = dyn_cast<CallExpr>(E))
    if (const FunctionDecl *FD = Call->getDirectCallee())
      if (FD->isInStdNamespace() && FD->getIdentifier() &&
          (FD->getName() == "begin" || FD->getName() == "cbegin") &&
          Call->getNumArgs() == 1 && containerRecord(Call->getArg(0)->getType()))
        return Call->getArg(0);
  return nullptr;
}

bool isContainerInsert(llvm::StringRef M) {
  return llvm::StringSwitch<bool>(M)
      .Cases("push_back", "emplace_back", "push_front", "emplace_front", true)
      .Cases("insert", "emplace", "push", "insert_or_assign", true)
      .Case("try_emplace", true)
      .Default(false);
}

bool isContainerReset(llvm::StringRef M) {
  return llvm::StringSwitch<bool>(M)
      .Cases("clear", "erase", "pop_back", "pop_front", "pop", true)
      .Cases("resize", "assign", "swap", "reset", true)
      .Default(false);
}

bool isStdFunction(QualType T) {
  if (T.isNull())
    return false;
  return isStdClass(T.getNonReferenceType().getCanonicalType()->getAsCXXRecordDecl(),
                    "function");
}

bool isStringType(QualType T) {
  if (T.isNull())
    return false;
  T = T.getNonReferenceType().getCanonicalType();
  if (T->isPointerType() || T->isArrayType()) {
    QualType Element = T->isPointerType() ? T->getPointeeType()
                                          : QualType(T->getArrayElementTypeNoTypeQual(), 0);
    return Element->isCharType();
  }
  const CXXRecordDecl *RD = T->getAsCXXRecordDecl();
  return isStdClass(RD, "basic_string") || isStdClass(RD, "basic_string_view");
}

bool isCallableType(QualType T) {
  if (T.isNull())
    return false;
  T = T.getNonReferenceType().getCanonicalType();
  if (T->isFunctionPointerType() || T->isFunctionType() ||
      T->isMemberFunctionPointerType())
    return true;
  const CXXRecordDecl *RD = T->getAsCXXRecordDecl();
  if (RD && RD->isLambda())
    return true;
  // libstdc++ and libc++ spell bind's result type differently.
  return isStdFunction(T) || isStdClass(RD, "_Bind") || isStdClass(RD, "__bind");
}

bool holdsCallable(QualType T) {
  if (isCallableType(T))
    return true;
  const CXXRecordDecl *RD =
      T.isNull() ? nullptr : T.getNonReferenceType()->getAsCXXRecordDecl();
  if (!RD || !RD->hasDefinition())
    return false;
  return llvm::any_of(RD->fields(), [](const FieldDecl *F) {
    return isCallableType(F->getType());
  });
}

bool isStdSwap(const CallExpr &Call) {
  const FunctionDecl *FD = Call.getDirectCallee();
  return FD && FD->isInStdNamespace() && FD->getIdentifier() &&
         FD->getName() == "swap" && Call.getNumArgs() == 2;
}

bool isStdBind(const CallExpr &Call) {
  const FunctionDecl *FD = Call.getDirectCallee();
  return FD && FD->isInStdNamespace() && FD->getIdentifier() &&
         FD->getName() == "bind" && Call.getNumArgs() >= 1;
}

unsigned placeholderIndex(const Expr &E) {
  const auto *Ref = dyn_cast<DeclRefExpr>(E.IgnoreParenImpCasts());
  const auto *Var = Ref ? dyn_cast<VarDecl>(Ref->getDecl()) : nullptr;
  const auto *Space =
      Var ? dyn_cast<NamespaceDecl>(Var->getDeclContext()) : nullptr;
  if (!Space || !Space->getIdentifier() ||
      Space->getName() != "placeholders" || !Space->isInStdNamespace() ||
      !Var->getIdentifier())
    return 0;
  unsigned N = 0;
  llvm::StringRef Name = Var->getName();
  return Name.consume_front("_") && !Name.getAsInteger(10, N) ? N : 0;
}

const CXXMethodDecl *enclosingMethodOfLambda(const CXXMethodDecl &Op) {
  const DeclContext *DC = Op.getParent()->getDeclContext();
  for (unsigned Depth = 0; Depth < 8; ++Depth) {
    const auto *Method = dyn_cast_or_null<CXXMethodDecl>(DC);
    if (!Method || !Method->getParent()->isLambda())
      return Method && !Method->isStatic() ? Method : nullptr;
    DC = Method->getParent()->getDeclContext();
  }
  return nullptr;
}

CallableRuns runsCallableArguments(const FunctionDecl &FD) {
  if (!FD.isInStdNamespace() || !FD.getIdentifier() || isa<CXXMethodDecl>(FD))
    return CallableRuns::None;
  return llvm::StringSwitch<CallableRuns>(FD.getName())
      .Cases("visit", "invoke", "apply", "call_once", CallableRuns::Once)
      .Cases("for_each", "for_each_n", "transform", "generate", "generate_n",
             CallableRuns::Repeatedly)
      .Cases("all_of", "any_of", "none_of", "count_if", "find_if",
             CallableRuns::Repeatedly)
      .Cases("remove_if", "sort", "stable_sort", "accumulate", "reduce",
             CallableRuns::Repeatedly)
      .Default(CallableRuns::None);
}

bool storesCallableArgument(const FunctionDecl &FD) {
  const auto *Method = dyn_cast<CXXMethodDecl>(&FD);
  if (!Method)
    return false;
  const CXXRecordDecl *Class = Method->getParent();
  if (isStdClass(Class, "function"))
    return true;
  if (!containerRecord(QualType(Class->getTypeForDecl(), 0)))
    return false;
  if (const auto *Op = dyn_cast<CXXMethodDecl>(&FD);
      Op && Op->getOverloadedOperator() == OO_Subscript)
    return true;
  return FD.getIdentifier() && isContainerInsert(FD.getName());
}

llvm::ArrayRef<const Expr *> threadStartArguments(const Expr &Start) {
  if (const auto *Construct = dyn_cast<CXXConstructExpr>(&Start)) {
    const CXXRecordDecl *RD = Construct->getType()->getAsCXXRecordDecl();
    if ((isStdClass(RD, "thread") || isStdClass(RD, "jthread")) &&
        !Construct->getConstructor()->isCopyOrMoveConstructor())
      return llvm::ArrayRef(Construct->getArgs(), Construct->getNumArgs());
    return {};
  }
  const auto *Call = dyn_cast<CallExpr>(&Start);
  const FunctionDecl *FD = Call ? Call->getDirectCallee() : nullptr;
  if (!FD || !FD->isInStdNamespace() || !FD->getIdentifier() ||
      FD->getName() != "async" || Call->getNumArgs() == 0)
    return {};
  // `std::async(std::launch::async, f, ...)`: after the launch policy.
  llvm::ArrayRef<const Expr *> Args(Call->getArgs(), Call->getNumArgs());
  return Args.front()->getType()->isEnumeralType() ? Args.drop_front() : Args;
}

bool isOwnerFactory(const FunctionDecl *FD) {
  return FD && FD->isInStdNamespace() && FD->getIdentifier() &&
         (FD->getName() == "make_unique" || FD->getName() == "make_shared");
}

bool copiesAnotherObject(const VarDecl &Var) {
  const Expr *Init = Var.getInit();
  if (!Init || Var.getType()->isReferenceType())
    return false;
  const auto *Construct = dyn_cast<CXXConstructExpr>(Init->IgnoreImplicit());
  return Construct && Construct->getConstructor()->isCopyOrMoveConstructor() &&
         Construct->getNumArgs() >= 1 &&
         Construct->getArg(0)->IgnoreImplicit()->isGLValue();
}

const CXXRecordDecl *optionalEmplacedClass(const CallExpr &Call) {
  const auto *Member = dyn_cast<CXXMemberCallExpr>(&Call);
  const CXXMethodDecl *MD = Member ? Member->getMethodDecl() : nullptr;
  if (!MD || !MD->getIdentifier() || MD->getName() != "emplace" ||
      !isStdClass(MD->getParent(), "optional"))
    return nullptr;
  return Call.getType().getNonReferenceType()->getAsCXXRecordDecl();
}

bool isStdAccumulate(const FunctionDecl &FD) {
  return FD.isInStdNamespace() && FD.getIdentifier() &&
         (FD.getName() == "accumulate" || FD.getName() == "reduce");
}

bool isSmartPointerCast(const FunctionDecl &FD) {
  if (!FD.getIdentifier() || !FD.isInStdNamespace() || FD.getNumParams() != 1)
    return false;
  llvm::StringRef N = FD.getName();
  return N == "dynamic_pointer_cast" || N == "static_pointer_cast" ||
         N == "const_pointer_cast" || N == "reinterpret_pointer_cast";
}

const Expr *smartPointerCastSource(const Expr *E) {
  const auto *Call = E ? dyn_cast<CallExpr>(E->IgnoreImplicit()) : nullptr;
  const FunctionDecl *FD = Call ? Call->getDirectCallee() : nullptr;
  return FD && isSmartPointerCast(*FD) && Call->getNumArgs() == 1
             ? Call->getArg(0)
             : nullptr;
}

bool isOstreamInsertion(const CXXOperatorCallExpr &Op) {
  if (Op.getOperator() != OO_LessLess || Op.getNumArgs() != 2)
    return false;
  const FunctionDecl *FD = Op.getDirectCallee();
  if (!FD || FD->getNumParams() < 1)
    return false;
  // A member operator<< takes the stream as its object.
  QualType Stream = isa<CXXMethodDecl>(FD)
                        ? Op.getArg(0)->getType()
                        : FD->getParamDecl(0)->getType().getNonReferenceType();
  return isStdClass(Stream->getAsCXXRecordDecl(), "basic_ostream");
}

const Expr *movedOrForwarded(const Expr *E) {
  const auto *Call = E ? dyn_cast<CallExpr>(E->IgnoreParenImpCasts()) : nullptr;
  const FunctionDecl *FD = Call ? Call->getDirectCallee() : nullptr;
  if (FD && Call->getNumArgs() == 1 && FD->isInStdNamespace() &&
      FD->getIdentifier() &&
      (FD->getName() == "move" || FD->getName() == "forward"))
    return Call->getArg(0);
  return nullptr;
}

} // namespace clang::tidy::torch
