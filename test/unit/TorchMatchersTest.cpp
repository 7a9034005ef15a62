//===--- TorchMatchersTest.cpp - torch-tidy unit tests --------------------===//

#include "api/TorchMatchers.h"
#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/ASTMatchers/ASTMatchers.h"
#include "clang/Frontend/ASTUnit.h"
#include "clang/Tooling/Tooling.h"
#include "gtest/gtest.h"

using namespace clang;
using namespace clang::ast_matchers;
using clang::tidy::torch::findEnclosingLoop;

namespace {

/// Parses \p Code and returns the loop enclosing the call to `target()`, as
/// the name of its statement class, or "none".
std::string loopAroundTarget(llvm::StringRef Code) {
  std::unique_ptr<ASTUnit> AST =
      tooling::buildASTFromCodeWithArgs(Code, {"-std=c++17"});
  auto Matches = match(
      findAll(callExpr(callee(functionDecl(hasName("target")))).bind("c")),
      AST->getASTContext());
  if (Matches.empty())
    return "no call";
  const auto *Call = Matches[0].getNodeAs<CallExpr>("c");
  auto Where = findEnclosingLoop(*Call, AST->getASTContext());
  if (!Where.Loop)
    return "none";
  std::string Name = Where.Loop->getStmtClassName();
  if (Where.ViaLambda)
    Name += "+lambda";
  return Name;
}

TEST(FindEnclosingLoop, EveryLoopKind) {
  EXPECT_EQ(loopAroundTarget("void target(); void f() { for (int i = 0; i < 3; ++i) target(); }"), "ForStmt");
  EXPECT_EQ(loopAroundTarget("void target(); void f(int *b, int *e) { while (b != e) { target(); ++b; } }"), "WhileStmt");
  EXPECT_EQ(loopAroundTarget("void target(); void f() { do { target(); } while (false); }"), "DoStmt");
  EXPECT_EQ(loopAroundTarget("void target(); void f() { int a[3]; for (int x : a) { (void)x; target(); } }"), "CXXForRangeStmt");
}

TEST(FindEnclosingLoop, LambdaDefinedInLoop) {
  EXPECT_EQ(loopAroundTarget("void target(); void f() { for (;;) { auto g = [] { target(); }; g(); } }"), "ForStmt+lambda");
}

TEST(FindEnclosingLoop, OutsideLoops) {
  EXPECT_EQ(loopAroundTarget("void target(); void f() { target(); for (;;) {} }"), "none");
  // The init of a for loop runs once.
  EXPECT_EQ(loopAroundTarget("int target(); void f() { for (int i = target(); i < 3; ++i) {} }"), "none");
  // A lambda defined before the loop is not part of it.
  EXPECT_EQ(loopAroundTarget("void target(); void f() { auto g = [] { target(); }; g(); }"), "none");
  // A local class's method is another function.
  EXPECT_EQ(loopAroundTarget("void target(); void f() { for (;;) { struct S { void m() { target(); } }; } }"), "none");
}

} // namespace
