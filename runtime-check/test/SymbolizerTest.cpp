#include "Symbolizer.h"
#include "TestUtil.h"

#include <gtest/gtest.h>

#include <sstream>

using namespace ttv;

TEST(Symbolizer, ParsesAddr2lineOutput) {
  const char out[] =
      "0x0000000000001149\n"
      "main\n"
      "/src/train.cpp:12\n"
      "0x0000000000002000\n"
      "at::Tensor::to(c10::Device, bool) const\n"
      "/usr/include/ATen/core/TensorBody.h:40\n"
      "run_step(int)\n"
      "/src/train.cpp:30 (discriminator 2)\n"
      "0x0000000000003000\n"
      "??\n"
      "??:0\n"
      "0x0000000000004000\n"
      "helper\n"
      "/src/h.cpp:7:9\n";
  auto r = Symbolizer::parseAddr2line(out, 4);
  ASSERT_EQ(r.size(), 4u);
  ASSERT_EQ(r[0].size(), 1u);
  EXPECT_EQ(r[0][0].file, "/src/train.cpp");
  EXPECT_EQ(r[0][0].line, 12);
  EXPECT_EQ(r[0][0].function, "main");
  ASSERT_EQ(r[1].size(), 2u);
  EXPECT_EQ(r[1][0].line, 40);
  EXPECT_EQ(r[1][1].file, "/src/train.cpp");
  EXPECT_EQ(r[1][1].line, 30);
  ASSERT_EQ(r[2].size(), 1u);
  EXPECT_FALSE(r[2][0].valid());
  EXPECT_EQ(r[3][0].file, "/src/h.cpp");  // llvm-style column stripped
  EXPECT_EQ(r[3][0].line, 7);
  EXPECT_EQ(Symbolizer::parseAddr2line("", 2).size(), 2u);  // tool failed: all unknown
}

TEST(Symbolizer, ClassifiesLibraryCode) {
  Symbolizer s(SymbolizerOptions{"", {"/opt/vendor/"}, false});
  EXPECT_TRUE(s.isSystemModule("/usr/lib/x86_64-linux-gnu/libc.so.6"));
  EXPECT_TRUE(s.isSystemModule("/home/u/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so"));
  EXPECT_TRUE(s.isSystemModule("/opt/libtorch/lib/libc10.so"));
  EXPECT_TRUE(s.isSystemModule("/build/lib/libtorch_tidy_rt.so"));
  EXPECT_TRUE(s.isSystemModule("/opt/vendor/libfoo.so"));
  EXPECT_TRUE(s.isSystemModule("linux-vdso.so.1"));
  EXPECT_FALSE(s.isSystemModule("/home/u/proj/build/train"));
  EXPECT_FALSE(s.isSystemModule("/home/u/proj/build/libmymodel.so"));
  EXPECT_TRUE(s.isSystemFile("/opt/libtorch/include/ATen/core/TensorBody.h"));
  EXPECT_TRUE(s.isSystemFile("/usr/include/c++/12/bits/stl_vector.h"));
  EXPECT_TRUE(s.isSystemFile("/usr/include/torch/csrc/api/include/torch/nn/module.h"));
  EXPECT_FALSE(s.isSystemFile("/home/u/proj/train.cpp"));
}

// Symbolises a real return address in the -g fixture program.
TEST(Symbolizer, ResolvesAKnownLineInADebugBinary) {
  Symbolizer s(SymbolizerOptions{});
  if (s.tool().empty())
    GTEST_SKIP() << "no addr2line or llvm-symbolizer";
  std::string out;
  ASSERT_EQ(tttest::runShell(tttest::shQuote(TT_FIXTURE_BIN) + " where", out), 0) << out;
  std::istringstream in(out);
  std::string module, offset;
  in >> module >> offset;
  ASSERT_FALSE(module.empty()) << out;
  uint64_t off = std::stoull(offset, nullptr, 16);
  auto r = s.symbolize(module, {off - 1});
  ASSERT_EQ(r.size(), 1u);
  ASSERT_FALSE(r[0].empty()) << s.tool();
  int want = tttest::markerLines(TT_FIXTURE_SRC).at("where");
  const SourceLoc &loc = r[0].back();  // outermost of the inline chain
  EXPECT_NE(loc.file.find("fixture_prog.cpp"), std::string::npos) << loc.file;
  EXPECT_EQ(loc.line, want);
  EXPECT_EQ(loc.function, "main");
}

TEST(Symbolizer, MissingModulesAndToolsDegrade) {
  Symbolizer s(SymbolizerOptions{"/nonexistent/addr2line", {}, false});
  EXPECT_TRUE(s.tool().empty());
  auto r = s.symbolize("/bin/sh", {1, 2});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(r[0].empty());
  Symbolizer t(SymbolizerOptions{});
  EXPECT_TRUE(t.symbolize("/nonexistent/module.so", {1})[0].empty());
}
