//===--- ModuleClasses.cpp - torch-tidy -----------------------------------===//
//
// What a module class tells about every instance of it: whether its
// constructor moves it, whether it has parameters, whether it holds layers
// that behave differently in training and evaluation (Dropout, BatchNorm).
//
//===----------------------------------------------------------------------===//

#include "ProgramModel.h"
#include "api/StdLibrary.h"
#include "api/TorchApi.h"
#include "api/TorchMatchers.h"
#include "clang/AST/RecursiveASTVisitor.h"

namespace clang::tidy::torch {

/// LibTorch's modules without parameters or buffers.
static bool isParameterlessLibraryModule(const CXXRecordDecl &RD) {
  std::string Q = RD.getQualifiedNameAsString();
  llvm::StringRef N(Q);
  if (!N.consume_front("torch::nn::"))
    return false;
  return N.ends_with("LossImpl") || N == "ReLUImpl" || N == "DropoutImpl" ||
         N == "FlattenImpl" || N == "SigmoidImpl" || N == "TanhImpl" ||
         N == "SoftmaxImpl" || N == "LogSoftmaxImpl" || N == "GELUImpl" ||
         N == "IdentityImpl" || N == "LeakyReLUImpl" || N == "ELUImpl" ||
         N.starts_with("MaxPool") || N.starts_with("AvgPool") ||
         N.starts_with("AdaptiveAvgPool") || N.starts_with("AdaptiveMaxPool") ||
         N.starts_with("Dropout");
}

/// Whether a user-defined constructor moves the module it builds.
static bool constructorMoves(const CXXRecordDecl &RD) {
  for (const CXXConstructorDecl *Ctor : RD.ctors()) {
    const Stmt *Body = Ctor->getBody();
    if (!Body)
      continue;
    struct FindTo : RecursiveASTVisitor<FindTo> {
      bool Found = false;
      bool VisitCXXMemberCallExpr(CXXMemberCallExpr *C) {
        if (const auto *MD = C->getMethodDecl())
          Found |= MD->getIdentifier() &&
                   (MD->getName() == "to" || MD->getName() == "cuda");
        return !Found;
      }
    } Finder;
    Finder.TraverseStmt(const_cast<Stmt *>(Body));
    if (Finder.Found)
      return true;
  }
  return false;
}

/// Whether an expression in a method of \p RD (its body, a constructor's
/// initialisers) satisfies \p Pred.
static bool anyExprInMethods(const CXXRecordDecl &RD,
                             llvm::function_ref<bool(const Expr &)> Pred) {
  struct ExprFinder : RecursiveASTVisitor<ExprFinder> {
    llvm::function_ref<bool(const Expr &)> Pred;
    bool Found = false;
    bool VisitExpr(Expr *E) {
      Found |= Pred(*E);
      return !Found;
    }
  } Finder;
  Finder.Pred = Pred;
  for (const Decl *D : RD.decls()) {
    const auto *FD = dyn_cast<FunctionDecl>(D);
    if (const auto *Template = dyn_cast<FunctionTemplateDecl>(D))
      FD = Template->getTemplatedDecl();
    if (FD && FD->hasBody())
      Finder.TraverseStmt(FD->getBody());
    if (const auto *Ctor = dyn_cast_or_null<CXXConstructorDecl>(FD))
      for (const CXXCtorInitializer *Init : Ctor->inits())
        Finder.TraverseStmt(Init->getInit());
    if (Finder.Found)
      return true;
  }
  return false;
}

/// Whether a method of \p RD registers a parameter, a buffer or a module.
static bool registersAnything(const CXXRecordDecl &RD) {
  return anyExprInMethods(RD, [](const Expr &E) {
    const auto *C = dyn_cast<CallExpr>(&E);
    const FunctionDecl *FD = C ? C->getDirectCallee() : nullptr;
    return FD && FD->getIdentifier() && FD->getName().starts_with("register_");
  });
}

/// Whether \p Init builds an empty holder (`Dropout drop{nullptr}`).
static bool buildsNullHolder(const Expr *Init) {
  if (const auto *Default = dyn_cast_or_null<CXXDefaultInitExpr>(Init))
    Init = Default->getExpr();
  if (const auto *List = dyn_cast_or_null<InitListExpr>(Init);
      List && List->getNumInits() == 1)
    Init = List->getInit(0);
  const auto *Construct =
      dyn_cast_or_null<CXXConstructExpr>(Init ? Init->IgnoreImplicit() : nullptr);
  return Construct && Construct->getNumArgs() == 1 &&
         Construct->getArg(0)->IgnoreImplicit()->getType()->isNullPtrType();
}

/// Whether a statement of \p F's own body, which runs on every path,
/// assigns \p Field, itself or through a method of its object that does
/// (`reset()` of a Cloneable, called by the constructor).
static bool assignsOnEveryPath(const FunctionDecl &F, const FieldDecl &Field,
                               unsigned Depth = 0) {
  const auto *Body = dyn_cast_or_null<CompoundStmt>(F.getBody());
  return Depth < 3 && Body && llvm::any_of(Body->body(), [&](const Stmt *S) {
    const auto *E = dyn_cast<Expr>(S);
    if (!E)
      return false;
    E = E->IgnoreImplicit();
    if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E);
        Op && Op->isAssignmentOp() && Op->getNumArgs() == 2)
      if (const auto *Member =
              dyn_cast<MemberExpr>(Op->getArg(0)->IgnoreParenImpCasts()))
        return Member->getMemberDecl() == &Field;
    const auto *Call = dyn_cast<CXXMemberCallExpr>(E);
    const CXXMethodDecl *Method = Call ? Call->getMethodDecl() : nullptr;
    const Expr *Object = Call ? Call->getImplicitObjectArgument() : nullptr;
    const FunctionDecl *Def = nullptr;
    return Method && Object && isa<CXXThisExpr>(Object->IgnoreParenImpCasts()) &&
           Method->hasBody(Def) && assignsOnEveryPath(*Def, Field, Depth + 1);
  });
}

/// Whether every constructor of \p RD leaves a module in \p Field: one
/// that starts it empty assigns it in a statement of its own body that runs
/// on every path (`drop = register_module("drop", Dropout(0.5));`), not
/// under a condition (`if (mc_dropout) drop = ...`).
static bool holdsModuleAfterConstruction(const CXXRecordDecl &RD,
                                         const FieldDecl &Field) {
  for (const CXXConstructorDecl *Ctor : RD.ctors()) {
    if (!Ctor->isUserProvided() || Ctor->isCopyOrMoveConstructor())
      continue;
    const FunctionDecl *Def = nullptr;
    if (!Ctor->hasBody(Def))
      continue;
    const Expr *Init = Field.getInClassInitializer();
    for (const CXXCtorInitializer *I : cast<CXXConstructorDecl>(Def)->inits())
      if (I->getMember() == &Field)
        Init = I->getInit();
    if (!buildsNullHolder(Init))
      continue;
    if (!assignsOnEveryPath(*Def, Field))
      return false;
  }
  return true;
}

Tri ProgramModel::userModuleModeLayers(const CXXRecordDecl &RD) {
  if (!RD.hasDefinition() || RD.isDependentContext())
    return Tri::Unknown;
  auto ModeDependent = [&](QualType T) {
    return isModuleHandleType(T) && moduleClassFacts(T).ModeLayers == Tri::Yes;
  };
  bool Conditional = false;
  for (const FieldDecl *Field : RD.fields())
    if (ModeDependent(Field->getType())) {
      if (holdsModuleAfterConstruction(RD, *Field))
        return Tri::Yes;
      Conditional = true;
    }
  // A layer built on some paths only (`if (mc_dropout) drop = ...`) proves
  // nothing for the module it is built in.
  if (Conditional)
    return Tri::Unknown;
  for (const CXXBaseSpecifier &Base : RD.bases())
    if (ModeDependent(Base.getType()))
      return Tri::Yes;
  // A layer its methods build (a Sequential's), or a method that reads the
  // mode itself (a functional dropout given is_training()).
  bool Builds = anyExprInMethods(RD, [&](const Expr &E) {
    if (const auto *Construct = dyn_cast<CXXConstructExpr>(&E))
      return ModeDependent(Construct->getType());
    const auto *Call = dyn_cast<CXXMemberCallExpr>(&E);
    const CXXMethodDecl *MD = Call ? Call->getMethodDecl() : nullptr;
    return MD && MD->getIdentifier() && MD->getName() == "is_training";
  });
  if (Builds)
    return Tri::Yes;
  // What its constructors leave in its members, by their summaries: a layer
  // a helper builds (`register_module("enc", conv_block(1, 32))`), a
  // constructor defined in another file of an audit.
  for (const CXXConstructorDecl *Ctor : RD.ctors())
    if (Ctor->isUserProvided() && !Ctor->isCopyOrMoveConstructor())
      if (const FunctionSummary *S = summary(*Ctor))
        for (const SummaryEffect &Effect : S->Effects)
          if (Effect.Where.Kind == Location::This &&
              Effect.Exit.ModeLayers == Tri::Yes)
            return Tri::Yes;
  // Otherwise unknown, not no: a container or a pointer member, or a method
  // defined elsewhere, may hold one.
  return Tri::Unknown;
}

Tri ProgramModel::userModuleParameters(const CXXRecordDecl &RD) {
  // A user module registers what its methods register: one that registers
  // nothing and holds no tensor, container or module with parameters has
  // none (a loss wrapper).
  if (!RD.hasDefinition() || RD.isDependentContext() || registersAnything(RD))
    return Tri::Unknown;
  // A class that declares virtual methods of its own may be the base of one
  // that has parameters.
  for (const CXXMethodDecl *Method : RD.methods())
    if (Method->isVirtualAsWritten() || Method->isPureVirtual())
      return Tri::Unknown;
  // A method defined elsewhere may register anything.
  for (const CXXMethodDecl *Method : RD.methods())
    if (!Method->isImplicit() && !Method->isDefaulted() &&
        !Method->isDeleted() && !Method->isPureVirtual() && !Method->hasBody())
      return Tri::Unknown;
  for (const FieldDecl *Field : RD.fields()) {
    QualType T = Field->getType();
    if (isTensorType(T) || containerRecord(T) || T->isPointerType())
      return Tri::Unknown;
    if (isModuleHandleType(T) &&
        moduleClassFacts(T).HasParameters != Tri::No)
      return Tri::Unknown;
  }
  for (const CXXBaseSpecifier &Base : RD.bases()) {
    const CXXRecordDecl *B = Base.getType()->getAsCXXRecordDecl();
    if (!B)
      return Tri::Unknown;
    std::string Name = B->getQualifiedNameAsString();
    if (Name == "torch::nn::Module" || Name == "torch::nn::Cloneable")
      continue;
    if (moduleClassFacts(Base.getType()).HasParameters != Tri::No)
      return Tri::Unknown;
  }
  return Tri::No;
}

const ModuleClassFacts &ProgramModel::moduleClassFacts(QualType ModuleType) {
  const Type *Key = ModuleType.getNonReferenceType().getCanonicalType().getTypePtr();
  auto [It, New] = ModuleClasses.try_emplace(Key);
  if (!New)
    return It->second;
  ModuleClassFacts F;
  if (const CXXRecordDecl *RD = moduleClassOfHandle(ModuleType)) {
    F.ConstructorMoves = constructorMoves(*RD);
    bool Library =
        llvm::StringRef(RD->getQualifiedNameAsString()).starts_with("torch::");
    if (isParameterlessLibraryModule(*RD))
      F.HasParameters = Tri::No;
    else if (!Library)
      F.HasParameters = userModuleParameters(*RD);
    if (!Library)
      F.ModeLayers = userModuleModeLayers(*RD);
    else if (ModeDependence D = layerModeDependence(*RD);
             D != ModeDependence::Unknown)
      F.ModeLayers = D == ModeDependence::Yes ? Tri::Yes : Tri::No;
  } else {
    F.ConstructorMoves = true; // unknown: claim nothing
  }
  ModuleClasses[Key] = F;
  return ModuleClasses[Key];
}

} // namespace clang::tidy::torch
