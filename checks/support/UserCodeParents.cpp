//===--- UserCodeParents.cpp - torch-tidy ---------------------------------===//

#include "UserCodeParents.h"
#include "clang/AST/RecursiveASTVisitor.h"
#include "clang/Basic/SourceManager.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include <memory>
#include <mutex>

namespace clang::tidy::torch {

namespace {

/// Mirrors ParentMapContext's visitor (implicit code and template
/// instantiations included, statements data-recursive) for Decls and Stmts,
/// and prunes declarations in system headers.
class ParentCollector : public RecursiveASTVisitor<ParentCollector> {
  using Base = RecursiveASTVisitor<ParentCollector>;

public:
  using ParentTable =
      llvm::DenseMap<const void *, llvm::SmallVector<DynTypedNode, 1>>;

  ParentCollector(const SourceManager &SM, ParentTable &Table)
      : SM(SM), Table(Table) {}

  bool shouldVisitTemplateInstantiations() const { return true; }
  bool shouldVisitImplicitCode() const { return true; }

  bool TraverseDecl(Decl *D) {
    if (!D)
      return true;
    if (isSystemHeaderDecl(*D, SM))
      return true;
    record(D);
    Stack.push_back(DynTypedNode::create(*D));
    bool Continue = Base::TraverseDecl(D);
    Stack.pop_back();
    return Continue;
  }

  bool dataTraverseStmtPre(Stmt *S) {
    record(S);
    Stack.push_back(DynTypedNode::create(*S));
    return true;
  }
  bool dataTraverseStmtPost(Stmt *) {
    Stack.pop_back();
    return true;
  }

private:
  void record(const void *Node) {
    if (Stack.empty())
      return;
    llvm::SmallVector<DynTypedNode, 1> &Entry = Table[Node];
    const DynTypedNode &Parent = Stack.back();
    // A node reached twice (e.g. through an instantiation) keeps one entry
    // per distinct parent, as ParentMapContext does. A shared default
    // argument is reached from every call that uses it, so past a few
    // parents the duplicate test goes through a set to stay linear.
    if (Entry.size() < LinearScanLimit) {
      if (!llvm::is_contained(Entry, Parent))
        Entry.push_back(Parent);
      return;
    }
    llvm::DenseSet<const void *> &Seen = ManyParentsSeen[Node];
    if (Seen.empty())
      for (const DynTypedNode &Known : Entry)
        Seen.insert(Known.getMemoizationData());
    if (Seen.insert(Parent.getMemoizationData()).second)
      Entry.push_back(Parent);
  }

  static constexpr size_t LinearScanLimit = 8;

  const SourceManager &SM;
  ParentTable &Table;
  llvm::SmallVector<DynTypedNode, 32> Stack;
  llvm::DenseMap<const void *, llvm::DenseSet<const void *>> ManyParentsSeen;
};

/// One map per live ASTContext; the driver analyses TUs on several threads.
struct Registry {
  std::mutex Lock;
  llvm::DenseMap<const ASTContext *, std::unique_ptr<UserCodeParents>> Maps;
};

Registry &registry() {
  static Registry R;
  return R;
}

void forgetContext(void *Ctx) {
  Registry &R = registry();
  std::lock_guard<std::mutex> Guard(R.Lock);
  R.Maps.erase(static_cast<const ASTContext *>(Ctx));
}

} // namespace

bool isSystemHeaderDecl(const Decl &D, const SourceManager &SM) {
  // isInSystemHeader() looks at the expansion location of a macro's code.
  return !isa<TranslationUnitDecl>(D) && D.getLocation().isValid() &&
         SM.isInSystemHeader(D.getLocation());
}

UserCodeParents::UserCodeParents(ASTContext &Ctx) {
  ParentCollector(Ctx.getSourceManager(), Parents)
      .TraverseDecl(Ctx.getTranslationUnitDecl());
}

const UserCodeParents &UserCodeParents::of(ASTContext &Ctx) {
  Registry &R = registry();
  {
    std::lock_guard<std::mutex> Guard(R.Lock);
    auto It = R.Maps.find(&Ctx);
    if (It != R.Maps.end())
      return *It->second;
  }
  // Built outside the lock: a TU is only ever analysed on one thread.
  auto Map = std::make_unique<UserCodeParents>(Ctx);
  const UserCodeParents &Result = *Map;
  {
    std::lock_guard<std::mutex> Guard(R.Lock);
    R.Maps[&Ctx] = std::move(Map);
  }
  Ctx.AddDeallocation(forgetContext, &Ctx);
  return Result;
}

llvm::ArrayRef<DynTypedNode>
UserCodeParents::parents(const DynTypedNode &Node) const {
  const void *Key = Node.getMemoizationData();
  if (!Key)
    return {};
  auto It = Parents.find(Key);
  if (It == Parents.end())
    return {};
  return It->second;
}

const Stmt *enclosingFunctionBody(const Stmt &S, ASTContext &Ctx) {
  const UserCodeParents &Map = UserCodeParents::of(Ctx);
  DynTypedNode Node = DynTypedNode::create(S);
  // Bounded: a parent chain is as deep as the code's nesting.
  for (unsigned Depth = 0; Depth < 4096; ++Depth) {
    llvm::ArrayRef<DynTypedNode> Parents = Map.parents(Node);
    if (Parents.empty())
      return nullptr;
    const DynTypedNode &Parent = Parents[0];
    if (const auto *FD = Parent.get<FunctionDecl>()) {
      const auto *MD = dyn_cast<CXXMethodDecl>(FD);
      if (!MD || !MD->getParent()->isLambda())
        return FD->getBody();
      // A lambda's call operator: continue at the lambda expression.
      llvm::ArrayRef<DynTypedNode> ClassParents = Map.parents(*MD->getParent());
      if (ClassParents.empty())
        return nullptr;
      Node = ClassParents[0];
      continue;
    }
    Node = Parent;
  }
  return nullptr;
}

static bool isInstantiation(const Decl &D) {
  TemplateSpecializationKind Kind = TSK_Undeclared;
  if (const auto *RD = dyn_cast<CXXRecordDecl>(&D))
    Kind = RD->getTemplateSpecializationKind();
  else if (const auto *FD = dyn_cast<FunctionDecl>(&D))
    Kind = FD->getTemplateSpecializationKind();
  return Kind == TSK_ImplicitInstantiation ||
         Kind == TSK_ExplicitInstantiationDeclaration ||
         Kind == TSK_ExplicitInstantiationDefinition;
}

bool isInTemplateInstantiation(const DynTypedNode &Node, ASTContext &Ctx) {
  const UserCodeParents &Map = UserCodeParents::of(Ctx);
  // Any path up counts, as with hasAncestor: a node shared between a
  // template and its instantiation has a parent in each.
  llvm::SmallVector<DynTypedNode, 8> Worklist = {Node};
  llvm::SmallPtrSet<const void *, 32> Seen;
  while (!Worklist.empty()) {
    DynTypedNode Current = Worklist.pop_back_val();
    if (const auto *D = Current.get<Decl>(); D && isInstantiation(*D))
      return true;
    for (const DynTypedNode &Parent : Map.parents(Current))
      if (Seen.insert(Parent.getMemoizationData()).second)
        Worklist.push_back(Parent);
  }
  return false;
}

LimitedParentMapScope::LimitedParentMapScope(const Decl &Within,
                                             ASTContext &Ctx)
    : Ctx(Ctx), SavedScope(Ctx.getTraversalScope()) {
  limitTo(Within);
}

LimitedParentMapScope::LimitedParentMapScope(const Stmt &Within,
                                             ASTContext &Ctx)
    : Ctx(Ctx), SavedScope(Ctx.getTraversalScope()) {
  const UserCodeParents &Map = UserCodeParents::of(Ctx);
  DynTypedNode Node = DynTypedNode::create(Within);
  for (unsigned Depth = 0; Depth < 4096; ++Depth) {
    llvm::ArrayRef<DynTypedNode> Parents = Map.parents(Node);
    if (Parents.empty())
      return; // not user code: leave the map whole
    if (const auto *D = Parents[0].get<Decl>()) {
      limitTo(*D);
      return;
    }
    Node = Parents[0];
  }
}

void LimitedParentMapScope::limitTo(const Decl &Within) {
  const Decl *TopLevel = &Within;
  while (const DeclContext *DC = TopLevel->getLexicalDeclContext()) {
    if (isa<TranslationUnitDecl>(DC))
      break;
    TopLevel = cast<Decl>(DC);
  }
  // MatchFinder iterates over a copy of the scope, so an analysis run from
  // a check's callback does not disturb the traversal in progress.
  Ctx.setTraversalScope({const_cast<Decl *>(TopLevel)});
}

LimitedParentMapScope::~LimitedParentMapScope() {
  Ctx.setTraversalScope(SavedScope);
}

} // namespace clang::tidy::torch
