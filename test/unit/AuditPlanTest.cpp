//===--- AuditPlanTest.cpp - torch-tidy -----------------------------------===//
//
// The pure parts of --audit's planning: which system headers open a file,
// which flags key the shared preamble, how TUs are grouped around a shared
// prefix, the words and lookups the preamble guard checks, the --shard
// split, the order of the queue, the memory budget.
//
//===----------------------------------------------------------------------===//

#include "MemoryBudget.h"
#include "PreambleFacts.h"
#include "PreamblePlan.h"
#include "PreambleScan.h"
#include "Shard.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include "gtest/gtest.h"
#include <atomic>
#include <chrono>
#include <thread>

using namespace llvm;
using namespace torchtidy;

namespace {

using Strings = std::vector<std::string>;

class Preamble : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(sys::fs::createUniqueDirectory("audit-plan", Dir));
    Sys = mkdir("sys");
    Proj = mkdir("proj");
  }
  void TearDown() override { sys::fs::remove_directories(Dir); }
  std::string mkdir(StringRef Name) {
    SmallString<128> Path(Dir);
    sys::path::append(Path, Name);
    sys::fs::create_directories(Path);
    return std::string(Path);
  }
  std::string write(StringRef Name, StringRef Text) {
    SmallString<128> Path(Dir);
    sys::path::append(Path, Name);
    sys::fs::create_directories(sys::path::parent_path(Path));
    std::error_code EC;
    raw_fd_ostream OS(Path, EC);
    OS << Text;
    return std::string(Path);
  }
  PreambleFlags flags() {
    return *splitPreambleFlags(
        {"clang++", "-std=c++17", "-isystem", Sys, "-I" + Proj}, Dir.str(),
        "");
  }
  /// The system prefix of a TU with \p Text.
  Strings prefix(StringRef Text) {
    return systemPrefix(write("tu.cpp", Text), flags());
  }
  SmallString<128> Dir;
  std::string Sys, Proj;
};

TEST_F(Preamble, SystemHeadersBeforeTheFirstCode) {
  write("sys/torch/torch.h", "#pragma once\n");
  write("sys/c10/x.h", "#pragma once\n");
  EXPECT_EQ(prefix("// header\n/* block\n comment */\n"
                   "#include <torch/torch.h>\n\n"
                   "  #  include \"c10/x.h\" // why\n"
                   "#include <torch/torch.h>\n" // again: skipped
                   "int x;\n#include <map>\n"),
            (Strings{"<torch/torch.h>", "<c10/x.h>"}));
  EXPECT_EQ(prefix("\xEF\xBB\xBF#include <torch/torch.h> /* why */\r\n"),
            Strings{"<torch/torch.h>"});
  // A `//` comment that a backslash continues swallows the next line.
  EXPECT_EQ(prefix("// RUN: x \\\n#include <c10/x.h>\n#include <torch/torch.h>\n"),
            Strings{"<torch/torch.h>"});
  // The standard library's own headers (not in a -isystem dir) are kept
  // only before one that is.
  EXPECT_EQ(prefix("#include <vector>\n#include <torch/torch.h>\n"
                   "#include <map>\n"),
            (Strings{"<vector>", "<torch/torch.h>"}));
  EXPECT_EQ(prefix("#include <vector>\n#include <map>\n"), Strings{});
}

TEST_F(Preamble, FollowsProjectHeadersAndLetsDefinesPass) {
  write("sys/torch/torch.h", "#pragma once\n");
  write("sys/c10/x.h", "#pragma once\n");
  write("proj/model.h", "#ifndef MODEL_H\n#define MODEL_H\n"
                        "#define MODEL_VERSION 2\n#include \"config.h\"\n"
                        "#include <torch/torch.h>\nstruct Net {};\n#endif\n");
  write("proj/config.h", "#pragma once\n#include <c10/x.h>\n");
  write("tu.h", "#ifndef TU_H\n#define TU_H\n#include <model.h>\n"
                "#endif /* TU_H */\n");
  EXPECT_EQ(prefix("#include \"tu.h\"\n#include <vector>\n"),
            (Strings{"<c10/x.h>", "<torch/torch.h>"}));
  // A header that ends without code returns to its includer.
  write("proj/only.h", "#pragma once\n#include <c10/x.h>\n");
  EXPECT_EQ(prefix("#include <only.h>\n#include <torch/torch.h>\n"),
            (Strings{"<c10/x.h>", "<torch/torch.h>"}));
}

TEST_F(Preamble, StopsAtAnythingItCannotVouchFor) {
  write("sys/a.h", "#pragma once\n");
  write("sys/b.h", "#pragma once\n");
  for (StringRef Stop :
       {"#if X\n", "#undef X\n", "#pragma pack(1)\n", "#include HEADER\n",
        "#include <a.h> junk\n", "#include \\\n<b.h>\n",
        "#include_next <b.h>\n", "/* open\n", "#include <>\n",
        "#include \"missing.h\"\n"})
    EXPECT_EQ(prefix(("#include <a.h>\n" + Stop + "#include <b.h>\n").str()),
              Strings{"<a.h>"})
        << Stop.str();
  // A guard that is not one, and a guarded header with more after #endif.
  write("proj/bad_guard.h", "#ifndef A_H\n#define B_H\n#include <b.h>\n"
                            "#endif\n");
  EXPECT_EQ(prefix("#include <a.h>\n#include \"proj/bad_guard.h\"\n"),
            Strings{"<a.h>"});
  write("proj/after.h", "#ifndef C_H\n#define C_H\n#endif\nint x;\n");
  EXPECT_EQ(prefix("#include <a.h>\n#include <after.h>\n#include <b.h>\n"),
            Strings{"<a.h>"});
}

TEST_F(Preamble, SplitsTheFlags) {
  write("rel/dir/x", "");
  std::optional<PreambleFlags> F = splitPreambleFlags(
      {"clang++", "-std=c++17", "-isystem", "rel", "-Irel/dir",
       "-iquote", "q", "--include-directory=inc", "-DX=1", "rel/dir/x",
       "-O2", "--sysroot=/sr", "tu.cpp"},
      Dir.str(), (Dir + "/tu.cpp").str());
  ASSERT_TRUE(F.has_value());
  std::string D(Dir);
  EXPECT_EQ(F->KeyArgs,
            (Strings{"clang++", "-std=c++17", "-isystem", D + "/rel", "-DX=1",
                     D + "/rel/dir/x", "-O2", "--sysroot", "/sr"}));
  EXPECT_EQ(F->ProjectDirs, (Strings{"-I" + D + "/rel/dir", "-iquote" + D +
                                     "/q", "-I" + D + "/inc"}));
  EXPECT_EQ(F->SystemDirs, Strings{D + "/rel"});
  for (StringRef Blocker :
       {"-include", "-includex.h", "-imacros", "-include-pch", "-fmodules",
        "-xc++", "-ivfsoverlay", "-working-directory", "-I-",
        "--driver-mode=cl"})
    EXPECT_FALSE(splitPreambleFlags({"clang++", Blocker.str(), "x.h"},
                                    Dir.str(), "")
                     .has_value())
        << Blocker.str();
  // A header map for -I: its lookups cannot be checked.
  std::string Map = write("map.hmap", "");
  EXPECT_FALSE(splitPreambleFlags({"clang++", "-I", Map}, Dir.str(), "")
                   .has_value());
}

TEST(PreambleGuard, WordsAndShadowedLookups) {
  StringSet<> Words;
  collectWords("#define C10_API 1 // a 2nd comment\nint x_1 = 0x1f + 1e5;",
               Words);
  for (StringRef W : {"define", "C10_API", "a", "comment", "int", "x_1"})
    EXPECT_TRUE(Words.contains(W)) << W.str();
  for (StringRef W : {"2nd", "nd", "x1f", "1f", "e5"})
    EXPECT_FALSE(Words.contains(W)) << W.str();

  SmallString<128> Dir;
  ASSERT_FALSE(sys::fs::createUniqueDirectory("shadow", Dir));
  sys::fs::create_directories(Dir + "/shadows/c10");
  sys::fs::create_directories(Dir + "/clean/c10");
  { std::error_code EC; raw_fd_ostream OS((Dir + "/shadows/c10/x.h").str(), EC); }
  { std::error_code EC; raw_fd_ostream OS((Dir + "/clean/y.h").str(), EC); }
  ShadowCheck Check({"c10/x.h", "vector"});
  EXPECT_EQ(Check.shadowingHeader({("-I" + Dir + "/clean").str()}), "");
  EXPECT_EQ(Check.shadowingHeader({("-iquote" + Dir + "/clean").str(),
                                   ("-I" + Dir + "/shadows").str()}),
            (Dir + "/shadows/c10/x.h").str());
  EXPECT_EQ(Check.shadowingHeader({("-I" + Dir + "/shadows").str()}),
            (Dir + "/shadows/c10/x.h").str()); // cached
  sys::fs::remove_directories(Dir);
}

TEST(PlanPrefixGroups, MostCommonFirstIncludeThenLongestCommonRun) {
  std::vector<PrefixCandidate> C = {
      {"f", {"<torch/torch.h>", "<iostream>", "<vector>"}},
      {"f", {"<torch/torch.h>", "<iostream>"}},
      {"f", {"<torch/torch.h>", "<iostream>", "<map>"}},
      {"f", {"<vector>"}},           // alone with its first include
      {"g", {"<torch/torch.h>"}},    // other flags, alone
      {"", {"<torch/torch.h>"}},     // cannot use a PCH
      {"f", {}},                     // opens with code
      {"f", {"<other.h>", "<a.h>"}}, // a second group under the same flags
      {"f", {"<other.h>", "<b.h>"}},
  };
  std::vector<PrefixGroup> Groups = planPrefixGroups(C);
  ASSERT_EQ(Groups.size(), 2u);
  EXPECT_EQ(Groups[0].Includes, (Strings{"<torch/torch.h>", "<iostream>"}));
  EXPECT_EQ(Groups[0].Members, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(Groups[1].Includes, Strings{"<other.h>"});
  EXPECT_EQ(Groups[1].Members, (std::vector<size_t>{7, 8}));
}

TEST(PlanPrefixGroups, OneMemberSufficesForAPlainRun) {
  std::vector<PrefixCandidate> C = {{"f", {"<torch/torch.h>", "<map>"}},
                                    {"g", {"<torch/torch.h>"}},
                                    {"g", {}}};
  std::vector<PrefixGroup> Groups = planPrefixGroups(C, 1);
  ASSERT_EQ(Groups.size(), 2u);
  EXPECT_EQ(Groups[0].Includes, (Strings{"<torch/torch.h>", "<map>"}));
  EXPECT_EQ(Groups[1].Members, std::vector<size_t>{1});
}

TEST(PlanPrefixGroups, TiesGoToTheSmallerInclude) {
  std::vector<PrefixCandidate> C = {
      {"f", {"<b.h>"}}, {"f", {"<a.h>"}}, {"f", {"<b.h>"}}, {"f", {"<a.h>"}}};
  std::vector<PrefixGroup> Groups = planPrefixGroups(C);
  ASSERT_EQ(Groups.size(), 2u);
  EXPECT_EQ(Groups[0].Includes, Strings{"<a.h>"});
  EXPECT_EQ(Groups[1].Includes, Strings{"<b.h>"});
}

TEST(Shard, ParsesOnlyIOfN) {
  Shard S;
  EXPECT_EQ(parseShard("2/4", S), "");
  EXPECT_EQ(S.Index, 2u);
  EXPECT_EQ(S.Count, 4u);
  for (StringRef Bad : {"0/4", "5/4", "1/0", "1", "a/b", "1/2/3", "-1/2", ""})
    EXPECT_NE(parseShard(Bad, S), "") << Bad.str();
}

TEST(Shard, PartsAreDisjointCoverAllAndIgnoreTheOrderGiven) {
  std::vector<TUJob> All;
  for (const char *F : {"/s/e.cpp", "/s/a.cpp", "/s/d.cpp", "/s/c.cpp",
                        "/s/b.cpp", "/s/f.cpp", "/s/g.cpp"})
    All.push_back(TUJob{F, {}});
  std::vector<std::string> Seen;
  for (unsigned I = 1; I <= 3; ++I) {
    std::vector<TUJob> Part = All;
    selectShard(Part, {I, 3});
    EXPECT_GE(Part.size(), 2u);
    for (const TUJob &J : Part)
      Seen.push_back(J.File);
  }
  llvm::sort(Seen);
  EXPECT_EQ(Seen, (Strings{"/s/a.cpp", "/s/b.cpp", "/s/c.cpp", "/s/d.cpp",
                           "/s/e.cpp", "/s/f.cpp", "/s/g.cpp"}));
  std::vector<TUJob> Reversed(All.rbegin(), All.rend());
  selectShard(Reversed, {2, 3});
  std::vector<TUJob> Forward = All;
  selectShard(Forward, {2, 3});
  ASSERT_EQ(Reversed.size(), Forward.size());
  for (size_t I = 0; I < Forward.size(); ++I)
    EXPECT_EQ(Reversed[I].File, Forward[I].File);
}

TEST(SortForAnalysis, FullParsesStartBesideTheBuildsThenLargestFirst) {
  // TUs 0 and 2 wait for a PCH being built; 1 and 3 need no build.
  std::vector<QueuedTU> Queue = {{0, 900, "a.cpp", true},
                                 {1, 100, "b.cpp", false},
                                 {2, 500, "c.cpp", true},
                                 {3, 300, "d.cpp", false},
                                 {4, 300, "c.cpp", false}};
  sortForAnalysis(Queue);
  std::vector<size_t> Order;
  for (const QueuedTU &Q : Queue)
    Order.push_back(Q.Index);
  EXPECT_EQ(Order, (std::vector<size_t>{4, 3, 1, 0, 2}));
}

TEST(MemoryBudget, HoldsBackWhatDoesNotFitButAlwaysRunsOne) {
  MemoryBudget Budget(100);
  Budget.acquire(150); // larger than the budget: runs alone
  std::atomic<bool> Second{false};
  std::thread Waiter([&] {
    Budget.acquire(10);
    Second = true;
    Budget.release(10);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(Second);
  Budget.release(150);
  Waiter.join();
  EXPECT_TRUE(Second);
  EXPECT_EQ(Budget.peakHolders(), 1u);

  Budget.acquire(40);
  Budget.acquire(60); // fits next to the first
  EXPECT_EQ(Budget.peakHolders(), 2u);
  Budget.release(40);
  Budget.release(60);
}

TEST(MemoryBudget, ReadsTheAvailableMemory) {
  std::optional<uint64_t> Available = availableMemory();
  if (sys::fs::exists("/proc/meminfo")) {
    ASSERT_TRUE(Available.has_value());
    EXPECT_GT(*Available, uint64_t(1) << 20);
  }
}

} // namespace
