//===--- AuditPlanTest.cpp - torch-tidy -----------------------------------===//
//
// The pure parts of --audit's planning: which includes open a file, how TUs
// are grouped around a shared prefix, the --shard split, the memory budget.
//
//===----------------------------------------------------------------------===//

#include "MemoryBudget.h"
#include "Shard.h"
#include "SharedPch.h"
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

TEST(LeadingIncludes, SkipsCommentsAndStopsAtOtherCode) {
  EXPECT_EQ(leadingIncludes("// header\n/* block\n comment */\n"
                            "#include <torch/torch.h>\n\n"
                            "  #  include \"net.h\" // why\n"
                            "#include <vector>\n"
                            "int x;\n#include <map>\n"),
            (Strings{"<torch/torch.h>", "\"net.h\"", "<vector>"}));
  EXPECT_EQ(leadingIncludes("\xEF\xBB\xBF#include <a.h>\r\n#include <b.h>\r\n"),
            (Strings{"<a.h>", "<b.h>"}));
}

TEST(LeadingIncludes, StopsAtAnythingItCannotVouchFor) {
  // Another directive, a macro, a block comment or junk after the name, a
  // line continuation, #include_next, an unterminated comment.
  EXPECT_EQ(leadingIncludes("#include <a.h>\n#define X\n#include <b.h>\n"),
            Strings{"<a.h>"});
  EXPECT_EQ(leadingIncludes("#include HEADER\n"), Strings{});
  EXPECT_EQ(leadingIncludes("#include <a.h> /* c */\n"), Strings{});
  EXPECT_EQ(leadingIncludes("#include <a.h> junk\n"), Strings{});
  EXPECT_EQ(leadingIncludes("#include \\\n<a.h>\n"), Strings{});
  EXPECT_EQ(leadingIncludes("#include_next <a.h>\n"), Strings{});
  EXPECT_EQ(leadingIncludes("/* open\n#include <a.h>\n"), Strings{});
  EXPECT_EQ(leadingIncludes("// comment \\\n#include <a.h>\n"), Strings{});
  EXPECT_EQ(leadingIncludes("#include <>\n"), Strings{});
}

class ResolveIncludes : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(sys::fs::createUniqueDirectory("audit-plan", Dir));
  }
  void TearDown() override { sys::fs::remove_directories(Dir); }
  std::string write(StringRef Name, StringRef Text) {
    SmallString<128> Path(Dir);
    sys::path::append(Path, Name);
    std::error_code EC;
    raw_fd_ostream OS(Path, EC);
    OS << Text;
    return std::string(Path);
  }
  SmallString<128> Dir;
};

TEST_F(ResolveIncludes, QuotedIncludesBecomeAbsolutePaths) {
  std::string Helper = write("helper.h", "int helper();\n");
  std::string TU = write("tu.cpp", "");
  EXPECT_EQ(
      resolveIncludes({"<a.h>", "\"helper.h\"", "\"missing.h\"", "<b.h>"}, TU),
      (Strings{"<a.h>", "\"" + Helper + "\""}));
}

TEST_F(ResolveIncludes, LooksThroughAGuardedProjectHeaderThatOpensTheTU) {
  write("once.h", "// comment\n#pragma once\n#include <torch/torch.h>\n"
                  "#include <vector>\nint code;\n");
  write("guard.h",
        "#ifndef GUARD_H\n#define GUARD_H\n#include <x.h>\n#endif\n");
  write("bad_guard.h", "#ifndef A_H\n#define B_H\n#include <x.h>\n#endif\n");
  std::string Code = write("code.h", "#pragma once\nint code;\n");
  std::string TU = write("tu.cpp", "");
  EXPECT_EQ(resolveIncludes({"\"once.h\"", "<later.h>"}, TU),
            (Strings{"<torch/torch.h>", "<vector>"}));
  EXPECT_EQ(resolveIncludes({"\"guard.h\""}, TU), Strings{"<x.h>"});
  // Not a guard it recognises, a header without includes, or not first.
  EXPECT_EQ(resolveIncludes({"\"bad_guard.h\""}, TU),
            Strings{"\"" + (Dir + "/bad_guard.h").str() + "\""});
  EXPECT_EQ(resolveIncludes({"\"code.h\""}, TU), Strings{"\"" + Code + "\""});
  EXPECT_EQ(resolveIncludes({"<a.h>", "\"once.h\""}, TU),
            (Strings{"<a.h>", "\"" + (Dir + "/once.h").str() + "\""}));
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
