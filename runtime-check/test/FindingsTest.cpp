#include "Findings.h"

#include <gtest/gtest.h>

using namespace ttv;

TEST(Findings, ParsesTheDriverObject) {
  std::vector<Finding> f;
  std::string err;
  ASSERT_TRUE(parseFindings(R"({"version":1,"findings":[
    {"check":"torch-non-blocking-d2h-race","level":"warning","file":"a/b.cpp","line":12,
     "column":5,"message":"read before sync",
     "notes":[{"file":"a/b.cpp","line":10,"column":3,"message":"copy here"}],"fixes":[]}]})",
                            f, err))
      << err;
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].check, "torch-non-blocking-d2h-race");
  EXPECT_EQ(f[0].loc.file, "a/b.cpp");
  EXPECT_EQ(f[0].loc.line, 12);
  EXPECT_EQ(f[0].loc.column, 5);
  ASSERT_EQ(f[0].notes.size(), 1u);
  EXPECT_EQ(f[0].notes[0].line, 10);
}

TEST(Findings, AcceptsABareArray) {
  std::vector<Finding> f;
  std::string err;
  ASSERT_TRUE(parseFindings(R"([{"check":"x","file":"f.cpp","line":1}])", f, err)) << err;
  EXPECT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].level, "warning");
  std::vector<Finding> none;
  EXPECT_TRUE(parseFindings(R"({"version":1,"findings":[]})", none, err));
  EXPECT_TRUE(none.empty());
}

TEST(Findings, RejectsMalformedInput) {
  std::vector<Finding> f;
  std::string err;
  EXPECT_FALSE(parseFindings("{", f, err));
  EXPECT_FALSE(parseFindings(R"({"version":1})", f, err));
  EXPECT_FALSE(parseFindings(R"("text")", f, err));
  EXPECT_FALSE(parseFindings(R"([{"check":"x","file":"f.cpp"}])", f, err));
  EXPECT_NE(err.find("finding #0"), std::string::npos) << err;
  EXPECT_FALSE(parseFindings(R"([{"file":"f.cpp","line":2}])", f, err));
  EXPECT_FALSE(readFindingsFile("/nonexistent.json", f, err));
}
