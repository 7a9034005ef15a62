#include "Paths.h"

#include <gtest/gtest.h>

using namespace ttv;

TEST(Paths, Normalizes) {
  EXPECT_EQ(normalizePath("/a//b/./c/../d.cpp"), "/a/b/d.cpp");
  EXPECT_EQ(normalizePath("./x.cpp"), "x.cpp");
  EXPECT_EQ(normalizePath("../x/../y.cpp"), "../y.cpp");
  EXPECT_EQ(normalizePath("/../a"), "/a");
  EXPECT_EQ(commonTail("/w/repo/samples/a.cpp", "samples/a.cpp"), 2u);
  EXPECT_EQ(commonTail("/w/a.cpp", "/v/b.cpp"), 0u);
}

TEST(Paths, MatchesRelativeSuffixes) {
  PathMatcher pm("", {"/home/u/repo/runtime-check/samples/a.cpp"});
  EXPECT_TRUE(pm.matches("/home/u/repo/runtime-check/samples/a.cpp", "runtime-check/samples/a.cpp"));
  EXPECT_TRUE(pm.matches("/home/u/repo/runtime-check/samples/a.cpp", "./samples/a.cpp"));
  EXPECT_TRUE(pm.matches("/home/u/repo/runtime-check/samples/a.cpp", "a.cpp"));
  EXPECT_FALSE(pm.matches("/home/u/repo/runtime-check/samples/a.cpp", "other/b.cpp"));
  EXPECT_FALSE(pm.matches("/home/u/repo/runtime-check/samples/a.cpp", "tests/a.cpp"));
}

TEST(Paths, MatchesAcrossMachines) {
  // Absolute paths from two machines: two shared trailing components suffice.
  PathMatcher pm("", {"/node/src/samples/a.cpp"});
  EXPECT_TRUE(pm.matches("/node/src/samples/a.cpp", "/work/main/samples/a.cpp"));
  // A basename alone only when it is unambiguous in the trace.
  PathMatcher one("", {"/node/x/main.cpp"});
  EXPECT_TRUE(one.matches("/node/x/main.cpp", "/laptop/y/main.cpp"));
  PathMatcher two("", {"/node/x/main.cpp", "/node/z/main.cpp"});
  EXPECT_FALSE(two.matches("/node/x/main.cpp", "/laptop/y/main.cpp"));
  EXPECT_TRUE(two.matches("/node/x/main.cpp", "x/main.cpp"));
  EXPECT_FALSE(two.matches("/node/x/main.cpp", "z/main.cpp"));
}

TEST(Paths, StripsTheSourceRoot) {
  PathMatcher pm("/build/src/", {"/build/src/lib/a.cpp"});
  EXPECT_TRUE(pm.matches("/build/src/lib/a.cpp", "lib/a.cpp"));
  EXPECT_TRUE(pm.matches("/build/src/lib/a.cpp", "/build/src/lib/a.cpp"));
}
