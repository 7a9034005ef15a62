#include "Matcher.h"
#include "TestUtil.h"

#include <gtest/gtest.h>

using namespace ttv;
using tttest::at;
using tttest::copy;
using tttest::event;

namespace {

Finding finding(const std::string &check, int line, const std::string &file = "src/train.cpp") {
  Finding f;
  f.check = check;
  f.loc.file = file;
  f.loc.line = line;
  return f;
}

const std::string kFile = "/home/u/proj/src/train.cpp";

// Stacks: 0 -> line 10, 1 -> line 20, 2 -> line 30, 3 -> line 40, 4 -> no user
// frame, 5 -> helper.cpp:5 called from train.cpp:50.
struct Fixture {
  Trace trace;
  std::vector<StackLocs> stacks{at(kFile, 10), at(kFile, 20), at(kFile, 30), at(kFile, 40),
                                StackLocs{}, StackLocs{}};
  Fixture() {
    trace.stacks.resize(stacks.size());
    stacks[5].user = {{"/home/u/proj/src/helper.cpp", 5, "helper"}, {kFile, 50, "main"}};
  }
  void add(Event e) { trace.events.push_back(std::move(e)); }
  Analysis run(const std::vector<Finding> &f, int slack = 0) {
    MatchOptions mo;
    mo.lineSlack = slack;
    return analyze(trace, stacks, f, mo);
  }
};

} // namespace

TEST(Matcher, PageableAsyncCopyConfirms) {
  Fixture fx;
  fx.add(copy("HtoD", true, "pageable", false, 0, 4 << 20));
  fx.add(copy("HtoD", true, "pageable", false, 0, 4 << 20));
  fx.add(copy("HtoD", true, "pinned", false, 1));    // line 20: pinned
  fx.add(copy("HtoD", true, "pageable", true, 2));   // line 30: blocking .to()
  auto a = fx.run({finding("torch-non-blocking-pageable", 10),
                   finding("torch-non-blocking-pageable", 20),
                   finding("torch-non-blocking-pageable", 30),
                   finding("torch-non-blocking-pageable", 99)});
  ASSERT_EQ(a.results.size(), 4u);
  EXPECT_EQ(a.results[0].status, Status::Confirmed);
  EXPECT_EQ(a.results[0].evidence.count, 2u);
  EXPECT_EQ(a.results[0].evidence.bytes, 8u << 20);
  EXPECT_NE(a.results[0].evidence.text.find("8.0 MiB"), std::string::npos)
      << a.results[0].evidence.text;
  EXPECT_EQ(a.results[1].status, Status::NotObserved);
  EXPECT_EQ(a.results[2].status, Status::NotObserved);
  EXPECT_EQ(a.results[3].status, Status::NotReached);
  EXPECT_TRUE(a.observations.empty());
  EXPECT_EQ(a.totals.pageableAsyncH2D, 2u);
}

TEST(Matcher, UnexplainedPageableCopiesAreObservations) {
  Fixture fx;
  fx.add(copy("HtoD", true, "pageable", false, 0));
  fx.add(copy("HtoD", true, "pageable", false, 1));
  fx.add(copy("HtoD", true, "pageable", false, 4));  // no user frame
  auto a = fx.run({finding("torch-non-blocking-pageable", 10)});
  ASSERT_EQ(a.observations.size(), 2u);
  bool sawLine20 = false, sawUnknown = false;
  for (const auto &o : a.observations) {
    EXPECT_EQ(o.kind, "pageable-async-h2d");
    sawLine20 |= o.line == 20 && o.file == kFile;
    sawUnknown |= o.file.empty();
  }
  EXPECT_TRUE(sawLine20);
  EXPECT_TRUE(sawUnknown);
}

TEST(Matcher, EmptyCacheNeedsRepeatedFrees) {
  Fixture fx;
  fx.add(event("free", 0));
  fx.add(event("free", 0));
  fx.add(event("free", 0));
  fx.add(event("free", 1));  // once only at line 20
  auto a = fx.run({finding("torch-empty-cache-in-loop", 10),
                   finding("torch-empty-cache-in-loop", 20)});
  EXPECT_EQ(a.results[0].status, Status::Confirmed);
  EXPECT_EQ(a.results[0].evidence.count, 3u);
  EXPECT_EQ(a.results[0].evidence.timeNs, 3000u);
  EXPECT_EQ(a.results[1].status, Status::NotObserved);
  EXPECT_EQ(a.totals.frees, 4u);
}

TEST(Matcher, DeviceMismatchThrowConfirmsThroughAnOuterFrame) {
  Fixture fx;
  Event t = event("throw", 5);  // thrown in helper.cpp:5, called at train.cpp:50
  t.deviceMismatch = true;
  t.message = "Expected all tensors to be on the same device";
  fx.add(t);
  Event other = event("throw", 1);  // a c10::Error of another kind
  fx.add(other);
  auto a = fx.run({finding("torch-device-mismatch", 50), finding("torch-device-mismatch", 20)});
  EXPECT_EQ(a.results[0].status, Status::Confirmed);
  EXPECT_EQ(a.results[0].evidence.example, t.message);
  EXPECT_EQ(a.results[1].status, Status::NotObserved);
}

TEST(Matcher, D2HRaceLooksAtTheCopyNote) {
  Fixture fx;
  fx.add(copy("DtoH", true, "pinned", false, 0));  // the copy at line 10
  fx.add(copy("DtoH", true, "pinned", true, 1));   // a synced one at line 20
  Finding race = finding("torch-non-blocking-d2h-race", 12);  // the read
  race.notes.push_back({"src/train.cpp", 10, 3, "copy"});
  Finding synced = finding("torch-non-blocking-d2h-race", 22);
  synced.notes.push_back({"src/train.cpp", 20, 3, "copy"});
  auto a = fx.run({race, synced});
  EXPECT_EQ(a.results[0].status, Status::Confirmed);
  EXPECT_EQ(a.results[0].lines, (std::vector<int>{12, 10}));
  EXPECT_EQ(a.results[1].status, Status::NotObserved);
}

TEST(Matcher, HostSyncInLoopCountsSyncs) {
  Fixture fx;
  for (int i = 0; i < 5; ++i)
    fx.add(event("sync", 3));
  fx.add(event("sync", 2));
  fx.add(copy("DtoH", false, "pageable", false, 2));  // a synchronous cudaMemcpy
  fx.add(event("sync", 1));
  auto a = fx.run({finding("torch-host-sync-in-loop", 40), finding("torch-host-sync-in-loop", 30),
                   finding("torch-host-sync-in-loop", 20)});
  EXPECT_EQ(a.results[0].status, Status::Confirmed);
  EXPECT_EQ(a.results[0].evidence.count, 5u);
  EXPECT_EQ(a.results[1].status, Status::Confirmed);
  EXPECT_EQ(a.results[2].status, Status::NotObserved);
}

TEST(Matcher, UnverifiableChecksAndSlack) {
  Fixture fx;
  fx.add(copy("HtoD", true, "pageable", false, 0));
  auto a = fx.run({finding("torch-cuda-unguarded", 10), finding("torch-non-blocking-pageable", 9)});
  EXPECT_EQ(a.results[0].status, Status::Unverifiable);
  EXPECT_EQ(a.results[1].status, Status::NotReached);
  auto b = fx.run({finding("torch-non-blocking-pageable", 9)}, 1);
  EXPECT_EQ(b.results[0].status, Status::Confirmed);
  EXPECT_TRUE(isVerifiableCheck("torch-empty-cache-in-loop"));
  EXPECT_FALSE(isVerifiableCheck("torch-loss-accumulation-graph"));
}

TEST(Matcher, OtherFilesDoNotMatch) {
  Fixture fx;
  fx.add(copy("HtoD", true, "pageable", false, 0));
  auto a = fx.run({finding("torch-non-blocking-pageable", 10, "other/train.cpp")});
  EXPECT_EQ(a.results[0].status, Status::NotReached);
  auto b = fx.run({finding("torch-non-blocking-pageable", 10, "train.cpp")});
  EXPECT_EQ(b.results[0].status, Status::Confirmed);
}

TEST(Matcher, Formats) {
  EXPECT_EQ(formatBytes(512), "512 B");
  EXPECT_EQ(formatBytes(3 << 20), "3.0 MiB");
  EXPECT_EQ(formatBytes(3ull << 30), "3.00 GiB");
  EXPECT_EQ(formatNs(1500), "1.5 us");
  EXPECT_EQ(formatNs(2500000), "2.50 ms");
  EXPECT_EQ(formatNs(3000000000ull), "3.00 s");
}
