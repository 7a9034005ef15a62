// Record with the real recorder core in the -g fixture program, symbolise
// with addr2line, match against findings at the program's marked lines, and
// drive the torch-tidy-verify binary in both of its modes.
#include "Matcher.h"
#include "Report.h"
#include "Symbolizer.h"
#include "TestUtil.h"
#include "Trace.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

using namespace ttv;
using tttest::runShell;
using tttest::shQuote;

namespace {

std::map<std::string, int> marks() { return tttest::markerLines(TT_FIXTURE_SRC); }

nlohmann::json finding(const std::string &check, const std::string &mark) {
  return {{"check", check}, {"level", "warning"}, {"file", "test/fixture_prog.cpp"},
          {"line", marks().at(mark)}, {"column", 5}, {"message", mark}, {"notes", nlohmann::json::array()}};
}

// Findings that the fixture's events must all confirm.
nlohmann::json confirmedFindings() {
  nlohmann::json d2h = finding("torch-non-blocking-d2h-race", "sync");
  d2h["line"] = marks().at("d2h") + 1;  // the "read" right after the copy
  d2h["notes"].push_back({{"file", "test/fixture_prog.cpp"}, {"line", marks().at("d2h")},
                          {"column", 5}, {"message", "copy"}});
  return {{"version", 1},
          {"findings",
           {finding("torch-non-blocking-pageable", "pageable"),
            finding("torch-empty-cache-in-loop", "free"),
            finding("torch-host-sync-in-loop", "sync"), d2h,
            finding("torch-device-mismatch", "throw"),
            finding("torch-tensor-to-discarded", "pinned")}}};
}

bool haveSymbolizer() { return !Symbolizer(SymbolizerOptions{}).tool().empty(); }

Analysis analyzeTrace(const std::string &path, const nlohmann::json &findingsDoc) {
  Trace t;
  std::string err;
  EXPECT_TRUE(readTraceFile(path, t, err)) << err;
  std::vector<Finding> f;
  EXPECT_TRUE(parseFindings(findingsDoc.dump(), f, err)) << err;
  Symbolizer sym(SymbolizerOptions{});
  return analyze(t, sym.resolve(t), f, MatchOptions{});
}

} // namespace

TEST(EndToEnd, RecordedStacksConfirmFindingsAtTheirLines) {
  if (!haveSymbolizer())
    GTEST_SKIP() << "no addr2line";
  std::string dir = tttest::scratchDir("e2e");
  std::string out;
  ASSERT_EQ(runShell(shQuote(TT_FIXTURE_BIN) + " trace " + shQuote(dir + "/t.jsonl"), out), 0)
      << out;
  nlohmann::json doc = confirmedFindings();
  doc["findings"].push_back(finding("torch-non-blocking-pageable", "pinned"));
  doc["findings"].push_back(finding("torch-non-blocking-pageable", "blocking"));
  doc["findings"].push_back(finding("torch-device-mismatch", "where"));
  Analysis a = analyzeTrace(dir + "/t.jsonl", doc);
  ASSERT_EQ(a.results.size(), 9u);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(a.results[i].status, Status::Confirmed)
        << a.results[i].finding.check << ": " << a.results[i].evidence.text;
  EXPECT_EQ(a.results[0].evidence.count, 3u);
  EXPECT_EQ(a.results[1].evidence.count, 3u);
  EXPECT_EQ(a.results[5].status, Status::Unverifiable);
  EXPECT_EQ(a.results[6].status, Status::NotObserved);  // pinned copy
  EXPECT_EQ(a.results[7].status, Status::NotObserved);  // copy followed by a sync
  EXPECT_EQ(a.results[8].status, Status::NotReached);   // "where" never ran
  EXPECT_EQ(a.totals.peakDeviceBytes, 1u << 20);
  EXPECT_EQ(a.totals.throws, 1u);
  // The unmarked sync after the blocking copy is a runtime-only observation.
  bool sawSyncs = false;
  for (const auto &o : a.observations)
    sawSyncs |= o.kind == "repeated-syncs" && o.file.find("fixture_prog.cpp") != std::string::npos;
  EXPECT_TRUE(sawSyncs);
}

TEST(EndToEnd, TerminateHandlerWritesTheTraceOfACrash) {
  if (!haveSymbolizer())
    GTEST_SKIP() << "no addr2line";
  std::string dir = tttest::scratchDir("crash");
  std::string out;
  int rc = runShell("TORCH_TIDY_TRACE=" + shQuote(dir + "/t.jsonl") + " " +
                        shQuote(TT_FIXTURE_BIN) + " crash",
                    out);
  EXPECT_EQ(rc, 128 + 6) << out;  // SIGABRT after the uncaught throw
  nlohmann::json doc = {{"version", 1},
                        {"findings", {finding("torch-device-mismatch", "crash")}}};
  Analysis a = analyzeTrace(dir + "/t.jsonl", doc);
  ASSERT_EQ(a.results.size(), 1u);
  EXPECT_EQ(a.results[0].status, Status::Confirmed) << a.results[0].evidence.text;
  EXPECT_NE(a.results[0].evidence.example.find("same device"), std::string::npos);
}

TEST(EndToEnd, VerifierTraceModeExitCodes) {
  if (!haveSymbolizer())
    GTEST_SKIP() << "no addr2line";
  std::string dir = tttest::scratchDir("cli-trace");
  std::string out;
  ASSERT_EQ(runShell(shQuote(TT_FIXTURE_BIN) + " trace " + shQuote(dir + "/t.jsonl"), out), 0);
  tttest::writeFile(dir + "/ok.json", confirmedFindings().dump());
  nlohmann::json bad = confirmedFindings();
  bad["findings"].push_back(finding("torch-non-blocking-pageable", "pinned"));
  tttest::writeFile(dir + "/bad.json", bad.dump());
  std::string verify = shQuote(TT_VERIFY_BIN);
  out.clear();
  EXPECT_EQ(runShell(verify + " --findings " + dir + "/ok.json --trace " + dir +
                         "/t.jsonl --report " + dir + "/r.json",
                     out),
            0)
      << out;
  EXPECT_NE(out.find("CONFIRMED"), std::string::npos) << out;
  auto report = nlohmann::json::parse(tttest::readFile(dir + "/r.json"));
  EXPECT_EQ(report["counts"]["CONFIRMED"], 5);
  out.clear();
  EXPECT_EQ(runShell(verify + " --findings " + dir + "/bad.json --trace " + dir + "/t.jsonl", out),
            kExitNotObserved)
      << out;
  out.clear();
  EXPECT_EQ(runShell(verify + " --findings " + dir + "/ok.json", out), kExitUsage) << out;
  out.clear();
  EXPECT_EQ(runShell(verify + " --findings /nonexistent.json --trace " + dir + "/t.jsonl", out),
            kExitUsage);
  out.clear();
  EXPECT_EQ(runShell(verify + " --bogus", out), kExitUsage);
  out.clear();
  EXPECT_EQ(runShell(verify + " --help", out), 0);
  EXPECT_NE(out.find("exit status"), std::string::npos);
}

// Run mode without a GPU: the fixture writes its own trace to the path the
// verifier hands it in TORCH_TIDY_TRACE. The "recorder" preloaded here is a
// file that cannot be preloaded (the dynamic loader skips it), so only the
// runner's plumbing is under test.
TEST(EndToEnd, VerifierRunMode) {
  if (!haveSymbolizer())
    GTEST_SKIP() << "no addr2line";
  std::string dir = tttest::scratchDir("cli-run");
  tttest::writeFile(dir + "/ok.json", confirmedFindings().dump());
  std::string out;
  int rc = runShell(shQuote(TT_VERIFY_BIN) + " --findings " + dir + "/ok.json --recorder " +
                        shQuote(TT_FIXTURE_BIN) + " --trace-dir " + dir + "/traces --report " +
                        dir + "/r.json -- " + shQuote(TT_FIXTURE_BIN) + " env",
                    out);
  EXPECT_EQ(rc, 0) << out;
  auto report = nlohmann::json::parse(tttest::readFile(dir + "/r.json"));
  EXPECT_EQ(report["counts"]["CONFIRMED"], 5) << out;
  EXPECT_EQ(report["program_status"], 0);
  EXPECT_EQ(report["traces"].size(), 1u) << out;

  out.clear();  // a program that writes no trace
  EXPECT_EQ(runShell(shQuote(TT_VERIFY_BIN) + " --findings " + dir + "/ok.json --recorder " +
                         shQuote(TT_FIXTURE_BIN) + " --trace-dir " + dir + "/none -- /bin/true",
                     out),
            kExitNoTrace)
      << out;
  out.clear();
  EXPECT_EQ(runShell(shQuote(TT_VERIFY_BIN) + " --findings " + dir +
                         "/ok.json --recorder /nonexistent.so -- /bin/true",
                     out),
            kExitUsage);
}

// The real libtorch_tidy_rt.so, preloaded into programs without CUDA: it must
// record c10::Error throws through its __cxa_throw interposer (caught, and
// uncaught through std::terminate), and write nothing for a program that
// neither throws nor uses CUDA.
TEST(EndToEnd, RealRecorderSeesThrowsWithoutAGpu) {
  if (std::string(TT_RECORDER).empty())
    GTEST_SKIP() << "libtorch_tidy_rt.so not built (no CUDA toolkit)";
  if (!haveSymbolizer())
    GTEST_SKIP() << "no addr2line";
  auto m = tttest::markerLines(TT_THROW_SRC);
  std::string dir = tttest::scratchDir("real-recorder");
  auto findingAt = [&](const std::string &mark) {
    return nlohmann::json{{"check", "torch-device-mismatch"}, {"file", "throw_prog.cpp"},
                          {"line", m.at(mark)}};
  };
  tttest::writeFile(dir + "/caught.json",
                    nlohmann::json{findingAt("caught"), findingAt("other")}.dump());
  tttest::writeFile(dir + "/uncaught.json", nlohmann::json{findingAt("uncaught")}.dump());
  std::string verify = shQuote(TT_VERIFY_BIN) + " --recorder " + shQuote(TT_RECORDER);
  std::string out;
  int rc = runShell(verify + " --findings " + dir + "/caught.json --trace-dir " + dir +
                        "/t1 --report " + dir + "/r1.json -- " + shQuote(TT_THROW_BIN),
                    out);
  EXPECT_EQ(rc, kExitNotReached) << out;  // "other" is no c10::Error: no event
  auto r1 = nlohmann::json::parse(tttest::readFile(dir + "/r1.json"));
  EXPECT_EQ(r1["findings"][0]["status"], "CONFIRMED") << out;
  EXPECT_EQ(r1["findings"][1]["status"], "NOT REACHED") << out;
  EXPECT_EQ(r1["program_status"], 0);
  EXPECT_NE(out.find("caught: Expected all tensors"), std::string::npos) << out;

  out.clear();
  rc = runShell(verify + " --findings " + dir + "/uncaught.json --trace-dir " + dir +
                    "/t2 --report " + dir + "/r2.json -- " + shQuote(TT_THROW_BIN) + " crash",
                out);
  EXPECT_EQ(rc, 0) << out;
  auto r2 = nlohmann::json::parse(tttest::readFile(dir + "/r2.json"));
  EXPECT_EQ(r2["findings"][0]["status"], "CONFIRMED") << out;
  EXPECT_EQ(r2["program_status"], 128 + 6);

  out.clear();
  EXPECT_EQ(runShell(verify + " --findings " + dir + "/uncaught.json --trace-dir " + dir +
                         "/t3 -- /bin/true",
                     out),
            kExitNoTrace)
      << out;
}
