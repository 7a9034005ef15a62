//===--- MemberBindings.cpp - torch-tidy ----------------------------------===//
//
// Members that name a caller's object for the lifetime of theirs: a
// reference member bound to a constructor's reference parameter
// (`Evaluator(Net &net) : net_(net)`), and a module handle member that a
// constructor copies from its parameter and no method reseats (a holder
// shares its module). Through them, what an object's methods do to the
// member happens to the caller's object, and what they require of it is
// judged on the caller's object.
//
//===----------------------------------------------------------------------===//

#include "ClassState.h"
#include "ProgramModel.h"
#include "api/StdLibrary.h"
#include "api/TorchApi.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"

namespace clang::tidy::torch {

namespace {

/// The parameter of \p Ctor that \p Init names: the parameter itself, a
/// copy or move of it, or the module a handle parameter holds (`*net`).
const ParmVarDecl *namedParameter(const Expr *Init,
                                  const CXXConstructorDecl &Ctor) {
  for (unsigned Depth = 0; Init && Depth < 4; ++Depth) {
    Init = stripConversions(Init);
    if (const Expr *Moved = movedOrForwarded(Init)) {
      Init = Moved;
      continue;
    }
    if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(Init);
        Op && Op->getOperator() == OO_Star && Op->getNumArgs() == 1 &&
        isModuleHandleType(Op->getArg(0)->getType())) {
      Init = Op->getArg(0);
      continue;
    }
    break;
  }
  const auto *Ref = dyn_cast_or_null<DeclRefExpr>(Init);
  const auto *P = Ref ? dyn_cast<ParmVarDecl>(Ref->getDecl()) : nullptr;
  return P && P->getDeclContext() == &Ctor ? P : nullptr;
}

/// Assignments to a member through `this` in a method body.
class ReseatFinder : public RecursiveASTVisitor<ReseatFinder> {
public:
  explicit ReseatFinder(const FieldDecl &Field) : Field(Field) {}
  bool VisitCXXOperatorCallExpr(CXXOperatorCallExpr *Op) {
    if (Op->isAssignmentOp() && Op->getNumArgs() == 2)
      Found |= names(Op->getArg(0));
    return !Found;
  }
  bool VisitBinaryOperator(BinaryOperator *BO) {
    if (BO->isAssignmentOp())
      Found |= names(BO->getLHS());
    return !Found;
  }
  bool VisitUnaryOperator(UnaryOperator *UO) {
    if (UO->getOpcode() == UO_AddrOf) // its address may be written through
      Found |= names(UO->getSubExpr());
    return !Found;
  }
  bool Found = false;

private:
  bool names(const Expr *E) const {
    const auto *Member = dyn_cast<MemberExpr>(E->IgnoreParenImpCasts());
    return Member && Member->getMemberDecl() == &Field;
  }
  const FieldDecl &Field;
};

} // namespace

bool ProgramModel::isBindingMember(const FieldDecl &Field) {
  // Asked for every member on every location that crosses a call.
  auto [It, Inserted] = BindingMembers.try_emplace(&Field, false);
  if (!Inserted)
    return It->second;
  QualType T = Field.getType();
  bool Binds = T->isLValueReferenceType();
  if (!Binds && isSharedModuleHandleType(T))
    if (const auto *Class = dyn_cast<CXXRecordDecl>(Field.getParent())) {
      ReseatFinder Finder(Field);
      for (const CXXMethodDecl *Method : Class->methods()) {
        const FunctionDecl *Body = nullptr;
        if (isa<CXXConstructorDecl>(Method) || !Method->hasBody(Body) || !Body)
          continue;
        Finder.TraverseStmt(Body->getBody());
        if (Finder.Found)
          break;
      }
      Binds = !Finder.Found;
    }
  BindingMembers[&Field] = Binds;
  return Binds;
}

bool ProgramModel::isBoundByConstructor(const FieldDecl &Field) {
  const auto *Class = dyn_cast<CXXRecordDecl>(Field.getParent());
  if (!Class || !isBindingMember(Field))
    return false;
  for (const CXXConstructorDecl *Ctor : Class->ctors())
    if (!Ctor->isCopyOrMoveConstructor() && boundParameter(*Ctor, Field))
      return true;
  return false;
}

bool ProgramModel::hasBindingMember(const CXXRecordDecl &Class) {
  if (!Class.hasDefinition())
    return false;
  for (const FieldDecl *Field : fieldsWithBases(*Class.getDefinition()))
    if (isBindingMember(*Field))
      return true;
  return false;
}

std::optional<unsigned>
ProgramModel::boundParameter(const CXXConstructorDecl &Ctor,
                             const FieldDecl &Field, unsigned Depth) {
  if (Depth > 4)
    return std::nullopt;
  // `using Base::Base;`: the base's constructor, with the same parameters.
  if (Ctor.isInheritingConstructor())
    if (const CXXConstructorDecl *Inherited =
            Ctor.getInheritedConstructor().getConstructor())
      return boundParameter(*Inherited, Field, Depth + 1);
  const FunctionDecl *Body = nullptr;
  if (!Ctor.hasBody(Body) || !Body || !isBindingMember(Field))
    return std::nullopt;
  const auto &Def = cast<CXXConstructorDecl>(*Body);
  // What the constructor hands on to another one (a base's, a delegated
  // one) binds the member to what it was handed.
  auto ThroughConstruction =
      [&](const Expr *Init) -> std::optional<unsigned> {
    const auto *Construct =
        dyn_cast_or_null<CXXConstructExpr>(Init ? Init->IgnoreImplicit() : nullptr);
    if (!Construct)
      return std::nullopt;
    std::optional<unsigned> Inner =
        boundParameter(*Construct->getConstructor(), Field, Depth + 1);
    if (!Inner || *Inner >= Construct->getNumArgs())
      return std::nullopt;
    if (const ParmVarDecl *P = namedParameter(Construct->getArg(*Inner), Def))
      return P->getFunctionScopeIndex();
    return std::nullopt;
  };
  const auto *Owner = dyn_cast<CXXRecordDecl>(Field.getParent());
  for (const CXXCtorInitializer *Init : Def.inits()) {
    if (Init->isDelegatingInitializer())
      return ThroughConstruction(Init->getInit());
    if (Init->getMember() == &Field) {
      const ParmVarDecl *P = namedParameter(Init->getInit(), Def);
      // A reference bound to a by-value parameter dangles: it names
      // nothing of the caller's.
      if (!P || (Field.getType()->isReferenceType() &&
                 !P->getType()->isLValueReferenceType()))
        return std::nullopt;
      return P->getFunctionScopeIndex();
    }
    if (Init->isBaseInitializer())
      if (const CXXRecordDecl *Base = Init->getBaseClass()->getAsCXXRecordDecl();
          Base && Owner && (Owner == Base || Base->isDerivedFrom(Owner)))
        return ThroughConstruction(Init->getInit());
  }
  return std::nullopt;
}

} // namespace clang::tidy::torch
